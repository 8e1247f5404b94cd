"""Per-op profile of decode steps: time inside every kernel op (by op and weight) vs the wall time of a step.

    python bench/profile_decode.py [-m MODEL] [-n STEPS] [--threads N]

Each op of the model's backend is wrapped in a timer, so the sum of op times vs the step's wall time shows how
much of a decode step is kernel time and how much is Python between the ops (the wrappers add ~1 us per op,
counted in neither). Figures are minima and medians over the steps; on a loaded machine, the calling thread's
CPU time (with --threads 1 all kernel work runs on it) is steadier than wall time.
"""
from __future__ import annotations

import argparse
import collections
import time
from types import SimpleNamespace

import numba
import numpy as np

from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams


class TimedOps:
    """The backend's ops, each call timed under `op` or `op:weight name` (linear)."""

    def __init__(self, ops):
        self._ops = ops
        self.seconds: dict[str, list[float]] = collections.defaultdict(list)

    def __getattr__(self, name):
        target = getattr(self._ops, name)
        if not callable(target) or name.isupper():
            return target

        def timed(*args, **kwargs):
            key = name
            if name == "linear":
                key = f"linear:{_weight_kind(args[1].name)}"
            started = time.perf_counter()
            result = target(*args, **kwargs)
            self.seconds[key].append(time.perf_counter() - started)
            return result

        return timed


def _weight_kind(name: str) -> str:
    """blk.3.attn_q.weight+blk.3.attn_k.weight -> attn_q+attn_k (the same key for every layer)."""
    return "+".join(part.split(".")[2] if part.startswith("blk.") else part.split(".")[0] for part in name.split("+"))


def profile(engine: LLMEngine, num_steps: int) -> None:
    timed = TimedOps(engine.model.ops)
    engine.model.ops = timed
    params = SamplingParams(temperature=0.0, max_tokens=num_steps + 2, ignore_eos=True)
    seq = engine.add_request([engine.tokenizer.bos_id or 2], params)
    engine.step()
    engine.step()  # warm: first decode step
    timed.seconds.clear()
    phases = {name: [] for name in ("schedule", "prepare_inputs", "forward", "compute_logits", "sample", "postprocess")}
    steps, cpu_steps = [], []
    for _ in range(num_steps):
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        batch = engine.scheduler.schedule()
        t1 = time.perf_counter()
        token_ids, positions, attn, logits_indices = engine.runner.prepare_inputs(batch)
        t2 = time.perf_counter()
        hidden = engine.model.forward(token_ids, positions, attn, engine.kv_cache.keys, engine.kv_cache.values)
        t3 = time.perf_counter()
        logits = engine.model.compute_logits(hidden[logits_indices])
        t4 = time.perf_counter()
        token = engine.sampler.sample(logits[0], seq.params, seq.seq_id, seq.token_ids, seq.num_prompt_tokens)
        t5 = time.perf_counter()
        engine.scheduler.postprocess(batch, [token])
        t6 = time.perf_counter()
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            phases[name].append(seconds)
        steps.append(t6 - t0)
        cpu_steps.append(time.thread_time() - cpu0)
    _report(timed.seconds, phases, steps, cpu_steps, num_steps)


def _report(op_seconds, phases, steps, cpu_steps, num_steps: int) -> None:
    step_ms, cpu_ms = 1e3 * np.asarray(steps), 1e3 * np.asarray(cpu_steps)
    print(f"decode step wall: min {step_ms.min():.2f} ms, median {np.median(step_ms):.2f} ms, "
          f"mean {step_ms.mean():.2f} ms  ({1e3 / np.median(step_ms):.1f} tok/s at the median); "
          f"calling thread's CPU time: min {cpu_ms.min():.2f} ms, median {np.median(cpu_ms):.2f} ms")
    for name, seconds in phases.items():
        ms = 1e3 * np.asarray(seconds)
        print(f"  phase {name:<16} min {ms.min():7.3f} ms  median {np.median(ms):7.3f} ms")
    print(f"{'op':<32} {'calls/step':>10} {'min us':>9} {'median us':>10} {'ms/step (median)':>17}")
    total = 0.0
    for key, seconds in sorted(op_seconds.items(), key=lambda kv: -sum(kv[1])):
        us = 1e6 * np.asarray(seconds)
        calls = len(seconds) / num_steps
        per_step = calls * np.median(us) / 1e3
        total += per_step
        print(f"{key:<32} {calls:>10.0f} {us.min():>9.1f} {np.median(us):>10.1f} {per_step:>17.3f}")
    print(f"sum of op medians: {total:.2f} ms/step; the rest of the step's median is Python between ops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("-n", "--steps", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("-c", "--ctx-size", type=int, default=4096)
    parser.add_argument("--unfused", action="store_true", help="op by op, without the one-call decode layer")
    args = parser.parse_args()
    if args.threads:
        numba.set_num_threads(args.threads)
    engine = LLMEngine(EngineConfig(model_path=resolve_model(args.model), ctx_size=args.ctx_size))
    if args.unfused:
        engine.model._decode_layer_plans = None
    profile(engine, args.steps)
    print(f"threads {numba.get_num_threads()}, threading layer {numba.threading_layer()}")


if __name__ == "__main__":
    main()
