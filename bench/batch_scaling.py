"""Decode steps of a batch against a lone sequence's, interleaved in one process: the engine's side of
`bench/serve_load.py`'s 8-streams-vs-1 ratio, at several thread counts.

    python bench/batch_scaling.py [-m MODEL] [--num-seqs 1 8] [--threads 1 2] [-n ROUNDS] [--context TOKENS]
                                  [--kv-type f16]

On a shared VM the speed drifts by tens of percent from one minute to the next (the same SmolLM2 step of 8
sequences took 13 ms, then 20 ms), so levels measured one after another, as profile_serve_step.py and
serve_load.py measure them, compare poorly. Here every (sequences, threads) variant runs one step in turn, round
after round, on inputs prepared once (the same tokens, positions and cache slots each time: a step rewrites its
cache entries), so a drift hits every variant alike. Each step is timed by phase: forward (the layers), logits
(final norm and LM head) and sample (the server's default sampling, temperature 0.7). Figures are medians over
the rounds; the ratios are of medians measured side by side:
- per thread count, a batch's step against the lone sequence's: N / that is the batch's throughput gain, the
  ceiling of serve_load's ratio at that level (the server adds HTTP, detokenisation and the clients);
- per batch size, the speed-up from the first thread count to each other (how the pool scales the step).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pocketcli  # noqa: F401  first: it keeps numpy's OpenBLAS single-threaded, as in `pocket serve`
import numba
import numpy as np

from pocketcli.config import DEFAULT_KV_TYPE, EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.registry import resolve_model

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script below, also when loaded by path
from profile_serve_step import server_params  # noqa: E402

PHASES = ("forward", "logits", "sample")


@dataclass(frozen=True)
class PreparedStep:
    """One decode step's inputs, as the engine prepared them for num_seqs sequences."""
    num_seqs: int
    token_ids: np.ndarray
    positions: np.ndarray
    attn: object
    logits_indices: np.ndarray
    items: list


def prepare_step(engine: LLMEngine, num_seqs: int, context_tokens: int) -> PreparedStep:
    """num_seqs sequences (the server's sampling, a seed each) prefilled and decoded until each holds at least
    context_tokens tokens, then their next decode step's inputs. The sequences are dropped afterwards: their
    cache blocks may go to the next batch prepared, which only changes what attention reads, not its cost."""
    seqs = [engine.add_request(engine.tokenizer.encode(f"Story number {i}: Once upon a time", add_special=True),
                               server_params(i, context_tokens + 8, greedy=False)) for i in range(num_seqs)]
    while any(seq.num_cached_tokens < seq.num_prompt_tokens or len(seq) < context_tokens for seq in seqs):
        engine.step()  # the prompts (a longer prompt than context_tokens is kept whole), then decode steps
    batch = engine.scheduler.schedule()
    token_ids, positions, attn, logits_indices = engine.runner.prepare_inputs(batch)
    if len(token_ids) != num_seqs:
        raise RuntimeError(f"expected a decode step of {num_seqs} tokens, the scheduler gave {len(token_ids)}")
    items = [item for item in batch.items if item.samples_token]
    step = PreparedStep(num_seqs, token_ids, positions, attn, logits_indices, items)
    for seq in seqs:
        engine.abort(seq)
    return step


def timed_step(engine: LLMEngine, step: PreparedStep) -> dict[str, float]:
    """Seconds of each phase of one decode step on the prepared inputs (the step's tokens are not kept)."""
    model, kv = engine.model, engine.kv_cache
    started = time.perf_counter()
    hidden = model.forward(step.token_ids, step.positions, step.attn, kv.keys, kv.values)
    forwarded = time.perf_counter()
    logits = model.compute_logits(hidden[step.logits_indices])
    projected = time.perf_counter()
    engine._sample_on_host(logits, step.items)
    sampled = time.perf_counter()
    return {"forward": forwarded - started, "logits": projected - forwarded, "sample": sampled - projected}


def interleaved_medians(engine: LLMEngine, steps: list[PreparedStep], thread_counts: list[int], rounds: int
                        ) -> dict[tuple[int, int], dict[str, float]]:
    """(num_seqs, threads) -> phase -> median ms over `rounds` rounds of one step of every variant in turn (plus
    'step': the phases' sum), after one unmeasured round."""
    variants = [(step, threads) for step in steps for threads in thread_counts]
    samples = {(step.num_seqs, threads): {name: [] for name in PHASES + ("step",)} for step, threads in variants}
    for round_index in range(rounds + 1):
        for step, threads in variants:
            numba.set_num_threads(threads)
            seconds = timed_step(engine, step)
            if round_index == 0:
                continue
            figures = samples[(step.num_seqs, threads)]
            for name, value in seconds.items():
                figures[name].append(value)
            figures["step"].append(sum(seconds.values()))
    return {key: {name: 1e3 * statistics.median(values) for name, values in figures.items()}
            for key, figures in samples.items()}


def report(medians: dict[tuple[int, int], dict[str, float]], seq_counts: list[int], thread_counts: list[int]) -> None:
    for (num_seqs, threads), figures in medians.items():
        phases = "  ".join(f"{name} {figures[name]:7.2f}" for name in PHASES)
        print(f"{num_seqs:3d} seqs, {threads} threads: step {figures['step']:7.2f} ms  ({phases} ms)")
    lone = seq_counts[0]
    for threads in thread_counts:
        for num_seqs in seq_counts[1:]:
            ratio = medians[(num_seqs, threads)]["step"] / medians[(lone, threads)]["step"]
            print(f"{threads} threads: {num_seqs} seqs' step = {ratio:.2f}x {lone} seq's -> "
                  f"{num_seqs / lone / ratio:.2f}x the tokens per second")
    first = thread_counts[0]
    for num_seqs in seq_counts:
        for threads in thread_counts[1:]:
            speedups = "  ".join(f"{name} {medians[(num_seqs, first)][name] / medians[(num_seqs, threads)][name]:.2f}x"
                                 for name in ("step",) + PHASES)
            print(f"{num_seqs} seqs, {first} -> {threads} threads: {speedups}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("--num-seqs", type=int, nargs="+", default=[1, 8], help="batch sizes; the first is the "
                        "baseline of the ratios (default: 1 8)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("-n", "--rounds", type=int, default=30)
    parser.add_argument("--context", type=int, default=40, help="tokens each sequence holds when measured (the "
                        "prompt and decoded tokens; serve_load's streams hold ~10-74)")
    parser.add_argument("--kv-type", default=DEFAULT_KV_TYPE, help="KV cache type (default: serve's)")
    args = parser.parse_args()
    if max(args.threads) > numba.config.NUMBA_NUM_THREADS:
        parser.error(f"--threads: at most {numba.config.NUMBA_NUM_THREADS} here (NUMBA_NUM_THREADS)")
    engine = LLMEngine(EngineConfig(model_path=resolve_model(args.model), ctx_size=max(512, args.context + 64),
                                    max_num_seqs=max(args.num_seqs), kv_type=args.kv_type))
    steps = [prepare_step(engine, num_seqs, args.context) for num_seqs in args.num_seqs]
    report(interleaved_medians(engine, steps, args.threads, args.rounds), args.num_seqs, args.threads)


if __name__ == "__main__":
    main()
