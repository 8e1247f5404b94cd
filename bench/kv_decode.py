"""Decode speed at a long context for each KV cache type (issue 26): N streams, each with its own random prompt of
--context tokens already in the cache, then timed decode steps, the types' rounds alternating so a busy machine's
drift touches each alike.

    python bench/kv_decode.py [-m MODEL] [--context 2000] [--streams 1 8] [--types f32 f16 q8_0] [--steps 16] [-r 3]
                              [--shared-prompt]

Prints tokens/s per type and stream count (median over the rounds) and the types' ratios to the first type.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.benchmark import random_prompt  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.registry import resolve_model  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402


def start_streams(engine: LLMEngine, num_streams: int, context: int, max_new: int, shared: bool) -> list:
    """num_streams sequences, each a random prompt of `context` tokens (one prompt for all when `shared`: the
    prefix cache then holds its blocks once, and each stream's decodes read them), prefilled (not timed)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_new, ignore_eos=True)
    seqs = []
    for s in range(num_streams):
        seqs.append(engine.add_request(random_prompt(engine, context, seed=0 if shared else s), params))
        while shared and seqs[-1].num_completion_tokens == 0:  # its blocks cached before the next stream asks
            engine.step()
    while any(seq.num_completion_tokens == 0 for seq in seqs):
        engine.step()
    return seqs


def time_steps(engine: LLMEngine, num_steps: int) -> float:
    started = time.perf_counter()
    for _ in range(num_steps):
        engine.step()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--types", nargs="+", default=["f32", "f16", "q8_0"])
    parser.add_argument("--steps", type=int, default=16, help="decode steps per timed round")
    parser.add_argument("-r", "--rounds", type=int, default=3)
    parser.add_argument("--shared-prompt", action="store_true",
                        help="one prompt for every stream, prefilled once (prefix cache): a busy box's shortcut")
    args = parser.parse_args()
    for num_streams in args.streams:
        max_new = args.steps * (args.rounds + 1) + 2
        engines = {t: LLMEngine(EngineConfig(resolve_model(args.model), ctx_size=args.context + max_new + 16,
                                             max_num_seqs=num_streams, kv_type=t,
                                             enable_prefix_caching=args.shared_prompt))
                   for t in args.types}
        for engine in engines.values():
            start_streams(engine, num_streams, args.context, max_new, args.shared_prompt)
            time_steps(engine, args.steps // 2)  # warm: every kernel of this batch size compiled and paged in
        rates: dict[str, list[float]] = {t: [] for t in args.types}
        for _ in range(args.rounds):
            for kv_type, engine in engines.items():
                rates[kv_type].append(num_streams * args.steps / time_steps(engine, args.steps))
        base = statistics.median(rates[args.types[0]])
        for kv_type in args.types:
            rate = statistics.median(rates[kv_type])
            print(f"context {args.context}, {num_streams} stream(s), KV {kv_type:>5}: {rate:7.2f} tok/s "
                  f"(rounds {', '.join(f'{r:.1f}' for r in rates[kv_type])}; x{rate / base:.3f} of "
                  f"{args.types[0]})", flush=True)
        del engines
    return 0


if __name__ == "__main__":
    sys.exit(main())
