"""Per-phase profile of batched decode steps as `pocket serve` runs them: N sequences with the server's default
sampling (temperature 0.7, no top-k/top-p/min-p, a seed each), through the engine's own phases.

    python bench/profile_serve_step.py [-m MODEL] [--num-seqs 1 4 8] [-n STEPS] [--threads 1] [--greedy]
                                       [--kv-type f16]

Phases: schedule, prepare_inputs, forward, compute_logits, sample, postprocess, and stream (detokenisation and
stop strings, what the EngineLoop does per output). Figures are the median over the steps of the calling thread's
CPU time (steady on a loaded machine when --threads 1 runs all kernel work on it) and of the wall time. Under
forward and compute_logits, the CPU time of each backend op (`linear` = the weight matmuls; `decode_layer` = one
token's fused layer, matmuls and attention together), median per step; `glue` is the phase's rest (numpy
arithmetic and Python between the ops).
"""
from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict

import pocketcli  # noqa: F401  first: it keeps numpy's OpenBLAS single-threaded, as in `pocket serve`
import numba
import numpy as np

from pocketcli.config import DEFAULT_KV_TYPE, EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine.outputs import StepOutput
from pocketcli.engine.request_stream import RequestStream
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams

PHASES = ("schedule", "prepare_inputs", "forward", "compute_logits", "sample", "postprocess", "stream")
OP_PHASES = ("forward", "compute_logits")  # the phases whose backend ops are timed one by one


class TimedOps:
    """The model's ops module, with the calling thread's CPU time summed per op (since the last `take`)."""

    def __init__(self, ops):
        self._ops = ops
        self.cpu_seconds: dict[str, float] = defaultdict(float)

    def __getattr__(self, name: str):
        value = getattr(self._ops, name)
        if not callable(value) or isinstance(value, type):
            return value

        @functools.wraps(value)
        def timed(*args, **kwargs):
            started = time.thread_time()
            try:
                return value(*args, **kwargs)
            finally:
                self.cpu_seconds[name] += time.thread_time() - started
        return timed

    def take(self) -> dict[str, float]:
        taken, self.cpu_seconds = dict(self.cpu_seconds), defaultdict(float)
        return taken


def server_params(seed: int, max_tokens: int, greedy: bool) -> SamplingParams:
    """What the OpenAI API's defaults become (protocol.make_sampling_params) for bench/serve_load.py's requests."""
    return SamplingParams(temperature=0.0 if greedy else 0.7, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
                          max_tokens=max_tokens, ignore_eos=True)


def profile(engine: LLMEngine, num_seqs: int, num_steps: int, greedy: bool
            ) -> tuple[dict[str, tuple[float, float]], dict[str, dict[str, float]]]:
    """(phase -> (median CPU ms, median wall ms), phase -> op -> median CPU ms) per decode step of num_seqs
    sequences; the ops of OP_PHASES only."""
    seqs = [engine.add_request(engine.tokenizer.encode(f"Story number {i}: Once upon a time", add_special=True),
                               server_params(i, num_steps + 4, greedy)) for i in range(num_seqs)]
    streams = {seq.seq_id: RequestStream(engine, seq) for seq in seqs}
    while any(seq.num_cached_tokens < seq.num_prompt_tokens for seq in seqs):
        engine.step()  # prefill
    engine.step()  # warm: one decode step
    cpu = {name: [] for name in PHASES}
    wall = {name: [] for name in PHASES}
    op_cpu = {name: defaultdict(list) for name in OP_PHASES}
    for _ in range(num_steps):
        marks, op_seconds = _step_marks(engine, streams)
        for name, (c0, w0), (c1, w1) in zip(PHASES, marks, marks[1:]):
            cpu[name].append(c1 - c0)
            wall[name].append(w1 - w0)
        for name in OP_PHASES:
            op_seconds[name]["glue"] = cpu[name][-1] - sum(op_seconds[name].values())
            for op, seconds in op_seconds[name].items():
                op_cpu[name][op].append(seconds)
    for seq in seqs:
        engine.abort(seq)
    phases = {name: (1e3 * float(np.median(cpu[name])), 1e3 * float(np.median(wall[name]))) for name in PHASES}
    ops = {name: {op: 1e3 * float(np.median(values + [0.0] * (num_steps - len(values))))
                  for op, values in op_cpu[name].items()} for name in OP_PHASES}
    return phases, ops


def _step_marks(engine: LLMEngine, streams: dict[int, RequestStream]
                ) -> tuple[list[tuple[float, float]], dict[str, dict[str, float]]]:
    """One engine step, phase by phase as LLMEngine.step and the EngineLoop run it: (CPU, wall) after each, and
    the CPU seconds of each op in OP_PHASES."""
    timed_ops: TimedOps = engine.model.ops
    timed_ops.take()
    marks = [(time.thread_time(), time.perf_counter())]
    batch = engine.scheduler.schedule()
    marks.append((time.thread_time(), time.perf_counter()))
    token_ids, positions, attn, logits_indices = engine.runner.prepare_inputs(batch)
    marks.append((time.thread_time(), time.perf_counter()))
    hidden = engine.model.forward(token_ids, positions, attn, engine.kv_cache.keys, engine.kv_cache.values)
    marks.append((time.thread_time(), time.perf_counter()))
    op_seconds = {"forward": timed_ops.take()}
    logits = engine.model.compute_logits(hidden[logits_indices])
    marks.append((time.thread_time(), time.perf_counter()))
    op_seconds["compute_logits"] = timed_ops.take()
    items = [item for item in batch.items if item.samples_token]
    sampled = engine._sample_on_host(logits, items)
    marks.append((time.thread_time(), time.perf_counter()))
    engine.scheduler.postprocess(batch, sampled)
    marks.append((time.thread_time(), time.perf_counter()))
    for item, token_id in zip(items, sampled):
        streams[item.seq.seq_id].process(StepOutput(item.seq.seq_id, [token_id], item.seq.finish_reason))
    marks.append((time.thread_time(), time.perf_counter()))
    return marks, op_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("--num-seqs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("-n", "--steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--greedy", action="store_true", help="temperature 0 instead of the server's 0.7")
    parser.add_argument("--kv-type", default=DEFAULT_KV_TYPE, help="KV cache type (default: serve's)")
    args = parser.parse_args()
    numba.set_num_threads(args.threads)
    engine = LLMEngine(EngineConfig(model_path=resolve_model(args.model), ctx_size=512,
                                    max_num_seqs=max(args.num_seqs), kv_type=args.kv_type))
    engine.model.ops = TimedOps(engine.model.ops)
    for num_seqs in args.num_seqs:
        figures, op_figures = profile(engine, num_seqs, args.steps, args.greedy)
        total_cpu, total_wall = sum(c for c, _ in figures.values()), sum(w for _, w in figures.values())
        print(f"{num_seqs} seqs: step CPU {total_cpu:.2f} ms, wall {total_wall:.2f} ms "
              f"({num_seqs * 1e3 / total_wall:.1f} tok/s by wall)")
        for name, (cpu_ms, wall_ms) in figures.items():
            print(f"  {name:<15} CPU {cpu_ms:8.3f} ms  wall {wall_ms:8.3f} ms  ({cpu_ms / num_seqs:6.3f} CPU ms/seq)")
            for op, op_ms in sorted(op_figures.get(name, {}).items(), key=lambda item: -item[1]):
                print(f"    {op:<17} CPU {op_ms:8.3f} ms")
    print(f"threads {numba.get_num_threads()}")


if __name__ == "__main__":
    main()
