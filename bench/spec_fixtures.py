"""Speculative decoding on the tiny drafter fixtures (MTP of MiMo / DeepSeek-V3 / Qwen3.5, DFlash, n-gram, draft
model): greedy output with and without speculation, acceptance and the cost of one speculative round.

    python bench/spec_fixtures.py [--device cpu|cuda] [-n 32] [--spec-k 3] [-r 2] [--drafters ngram,dflash] [--json]

The fixtures are random tiny models, so acceptance says the drafter and rollback work, not how good a drafter is;
the timings are per-round overheads of the machinery at toy sizes.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pocketcli import engine_factory  # noqa: E402
from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.device import DeviceUnavailableError, backend_for, resolve_device  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402

# repeats give n-gram lookup something to find; ids below every fixture's vocabulary (320)
PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64, 17, 200, 45, 99]
DRAFTERS = ("ngram", "draft", "dflash", "mtp-mimo", "mtp-deepseek", "mtp-qwen35")


@dataclass
class Fixture:
    drafter: str
    target_path: str
    spec: str
    draft_model_path: str | None = None


def build_fixture(drafter: str, root: Path) -> Fixture:
    """Write the tiny checkpoint(s) for one drafter under root (the builders the tests use)."""
    from tests.models.tiny_gguf import write_tiny_model
    from tests.spec import spec_checkpoints as checkpoints

    if drafter in ("ngram", "draft", "dflash"):
        target = root / "qwen3.gguf"
        if not target.exists():
            write_tiny_model(target, "qwen3", seed=2)
        if drafter == "ngram":
            return Fixture(drafter, str(target), "ngram")
        if drafter == "draft":  # the same weights quantized: another model, same vocabulary, mostly agrees
            draft = write_tiny_model(root / "qwen3_q4.gguf", "qwen3", seed=2, quant="Q4_0")
            return Fixture(drafter, str(target), "draft", str(draft))
        checkpoints.write_dflash_checkpoint(root / "dflash")
        return Fixture(drafter, str(target), "dflash", str(root / "dflash"))
    import transformers

    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars between the table rows
    if drafter == "mtp-mimo":  # echo: an MTP that often repeats the target's next token, so drafts get accepted
        from tests.hf.tiny_hf import save_tiny_model

        save_tiny_model(root / "qwen2", "qwen2")
        return Fixture(drafter, str(checkpoints.add_mimo_mtp_layer(root / "qwen2", root / "mimo", echo=True)), "mtp")
    if drafter == "mtp-deepseek":
        checkpoints.save_tiny_deepseek(root / "dsv3")
        return Fixture(drafter, str(checkpoints.add_nextn_layer(root / "dsv3", root / "dsv3_mtp")), "mtp")
    if drafter == "mtp-qwen35":
        from tests.hf.tiny_qwen_next_hf import save_tiny_model

        save_tiny_model(root / "qwen35", "qwen35")
        return Fixture(drafter, str(checkpoints.add_qwen35_mtp_weights(root / "qwen35", root / "qwen35_mtp")), "mtp")
    raise ValueError(f"unknown drafter {drafter!r}; expected one of {', '.join(DRAFTERS)}")


def timed_greedy(engine: LLMEngine, max_tokens: int) -> tuple[list[int], list[float], list[float]]:
    """Greedy tokens after PROMPT through the engine's scheduler, the seconds of every decode step (those after the
    step that emitted the first token) and of the decode steps that ran a speculative round (draft + verify; the
    others had no draft, e.g. no n-gram match, and decoded one token plainly)."""
    seq = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
    step_seconds, round_seconds = [], []
    while engine.has_unfinished():
        had_first_token, rounds_before = bool(seq.completion_token_ids), _counters(engine).get("rounds")
        started = time.perf_counter()
        engine.step()
        seconds = time.perf_counter() - started
        if had_first_token:
            step_seconds.append(seconds)
            if _counters(engine).get("rounds") != rounds_before:
                round_seconds.append(seconds)
    return list(seq.completion_token_ids), step_seconds, round_seconds


def best_run(engine: LLMEngine, max_tokens: int, repetitions: int) -> tuple:
    """The fastest of `repetitions` timed runs (after a warm-up), with the speculative counters of that run."""
    timed_greedy(engine, 4)  # warm-up: kernels compiled, buffers allocated
    best = None
    for _ in range(repetitions):
        before = _counters(engine)
        tokens, steps, rounds = timed_greedy(engine, max_tokens)
        after = _counters(engine)
        run = (tokens, steps, rounds, {key: after[key] - before[key] for key in after})
        if best is None or sum(steps) < sum(best[1]):
            best = run
    return best


def _counters(engine: LLMEngine) -> dict:
    if engine.speculative is None:
        return {}
    stats = engine.speculative.stats
    return {"rounds": stats.num_rounds, "drafted": stats.num_draft_tokens, "accepted": stats.num_accepted_tokens,
            "emitted": stats.num_emitted_tokens}


def make_engine(fixture: Fixture, backend: str, spec_k: int, speculate: bool) -> LLMEngine:
    spec = {"spec": fixture.spec, "spec_k": spec_k, "draft_model_path": fixture.draft_model_path} if speculate else {}
    return engine_factory.make_engine(EngineConfig(fixture.target_path, ctx_size=128, block_size=4, backend=backend,
                                                   **spec))


def measure(fixture: Fixture, backend: str, max_tokens: int, spec_k: int, repetitions: int) -> dict:
    """One table row: plain greedy vs speculative greedy on the fixture."""
    plain_tokens, plain_steps, _, _ = best_run(make_engine(fixture, backend, spec_k, False), max_tokens, repetitions)
    spec_tokens, spec_steps, round_steps, counts = best_run(make_engine(fixture, backend, spec_k, True), max_tokens, repetitions)
    ms_per_plain_token = 1e3 * sum(plain_steps) / len(plain_steps)
    ms_per_spec_token = 1e3 * sum(spec_steps) / max(len(spec_tokens) - 1, 1)
    rounds = counts["rounds"]
    return {"drafter": fixture.drafter, "identical_output": spec_tokens == plain_tokens, "tokens": len(spec_tokens),
            "rounds": rounds, "decode_steps": len(spec_steps), "drafted": counts["drafted"],
            "accepted": counts["accepted"],
            "acceptance_rate": round(counts["accepted"] / counts["drafted"], 4) if counts["drafted"] else 0.0,
            "mean_accepted_length": round(counts["emitted"] / rounds, 3) if rounds else 0.0,
            "bonus_token_counted": True,
            "ms_per_spec_round": round(1e3 * sum(round_steps) / len(round_steps), 3) if round_steps else None,
            "ms_per_plain_token": round(ms_per_plain_token, 3),
            "tok_s_ratio": round(ms_per_plain_token / ms_per_spec_token, 3)}


HEADER = ("drafter", "same", "rounds", "drafted", "accepted", "accept", "mean_len*", "ms/round", "ms/tok(off)",
          "tok/s x")


def format_row(row: dict) -> str:
    if "error" in row:
        return f"{row['drafter']:<13} error: {row['error']}"
    cells = (row["drafter"], "yes" if row["identical_output"] else "NO", row["rounds"], row["drafted"],
             row["accepted"], f"{row['acceptance_rate']:.2f}", f"{row['mean_accepted_length']:.2f}",
             f"{row['ms_per_spec_round'] or 0:.2f}", f"{row['ms_per_plain_token']:.2f}", f"{row['tok_s_ratio']:.2f}")
    return f"{cells[0]:<13}" + "".join(f"{cell!s:>12}" for cell in cells[1:])


def run(drafters: list[str], backend: str, max_tokens: int, spec_k: int, repetitions: int,
        on_row=lambda row: None) -> list[dict]:
    """Build each drafter's fixture in a temporary directory and measure it; a drafter that cannot run on this
    device or install (no torch/transformers for the HF fixtures) gets an error row instead of stopping the rest.
    on_row sees each row as it is measured (a run cut short by a timeout still shows what it had)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="spec_fixtures_") as tmp:
        for drafter in drafters:
            try:
                fixture = build_fixture(drafter, Path(tmp))
                rows.append(measure(fixture, backend, max_tokens, spec_k, repetitions))
            except (ImportError, ValueError, RuntimeError, NotImplementedError) as error:
                rows.append({"drafter": drafter, "error": f"{type(error).__name__}: {error}".splitlines()[0]})
            on_row(rows[-1])
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("-n", "--max-tokens", type=int, default=32)
    parser.add_argument("--spec-k", type=int, default=3, help="most draft tokens per round (DFlash block - 1 = 3)")
    parser.add_argument("-r", "--repetitions", type=int, default=2, help="timed runs per engine; the fastest counts")
    parser.add_argument("--drafters", default=",".join(DRAFTERS), help="comma-separated, from " + ",".join(DRAFTERS))
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args(argv)
    drafters = [name for name in args.drafters.split(",") if name]
    unknown = sorted(set(drafters) - set(DRAFTERS))
    if unknown or args.max_tokens < 2 or args.spec_k < 1 or args.repetitions < 1:
        parser.error(f"unknown drafters {unknown}" if unknown else "need -n >= 2, --spec-k >= 1, -r >= 1")
    try:
        backend = backend_for(resolve_device(args.device), "cpu")
    except DeviceUnavailableError as error:
        parser.exit(2, f"error: {error}\n")
    if not args.json:
        print(f"device {args.device}, {args.max_tokens} greedy tokens, spec-k {args.spec_k}, best of "
              f"{args.repetitions}; *mean accepted length counts the bonus token (tokens emitted per round)")
        print(f"{HEADER[0]:<13}" + "".join(f"{name:>12}" for name in HEADER[1:]), flush=True)
    rows = run(drafters, backend, args.max_tokens, args.spec_k, args.repetitions,
               on_row=lambda row: args.json or print(format_row(row), flush=True))
    if args.json:
        print(json.dumps({"device": args.device, "max_tokens": args.max_tokens, "spec_k": args.spec_k,
                          "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    sys.exit(0 if all(row.get("identical_output", True) for row in main()) else 1)  # a lossy drafter fails
