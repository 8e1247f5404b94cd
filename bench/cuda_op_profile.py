"""Where a CUDA decode step and a prefill spend their time, op by op, on one NVIDIA GPU.

    python bench/cuda_op_profile.py [--model PATH | --gemma-shaped DIR] [--prompt-tokens 128] [--steps 8]

The engine runs op by op here (--no-cuda-graph), then once more as by default, for the graphed decode step's
time. Every op of the cuda backend is wrapped: the device is synchronised before and after each call, so an op's
time is its launch (host) plus its kernels (device). Also printed: one empty kernel's launch cost from Python,
and the LM head's mat-vec alone in GB/s. `--gemma-shaped DIR` writes a Gemma-3-270M-shaped Q8_0 model with
random weights there first (gpu_check.sh's); with NUMBA_ENABLE_CUDASIM=1 it runs on tiny shapes (logic only).
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from numba import config, cuda  # noqa: E402

from kernels_numba import get_ops  # noqa: E402
from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402

SIMULATED = bool(config.ENABLE_CUDASIM)


def write_gemma_shaped(directory: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
    import dataclasses

    import tiny_gguf

    path = directory / "gemma3-270m-shaped-q8_0.gguf"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        shape = (dict(n_layer=2, n_embd=64, n_head=2, n_head_kv=1, head_dim=32, n_ff=64, n_vocab=512) if SIMULATED
                 else dict(n_layer=18, n_embd=640, n_head=4, n_head_kv=1, head_dim=256, n_ff=2048, n_vocab=262144))
        tiny_gguf.TINY_CONFIGS["gemma3"] = dataclasses.replace(
            tiny_gguf.TINY_CONFIGS["gemma3"], **shape, n_ctx_train=32768, sliding_window=512)
        tiny_gguf.write_tiny_model(path, "gemma3", seed=0, quant="Q8_0")
    return path


class OpTimer:
    """Wraps the public functions of the cuda ops module; `table()` lists calls, launch and total ms per op."""

    def __init__(self, ops):
        self.ops, self.originals = ops, {}
        self.calls = collections.Counter()
        self.launch_s = collections.Counter()
        self.total_s = collections.Counter()

    def __enter__(self):
        for name in self.ops.__all__:
            fn = getattr(self.ops, name)
            if callable(fn) and not isinstance(fn, type):
                self.originals[name] = fn
                setattr(self.ops, name, self._timed(name, fn))
        return self

    def __exit__(self, *exc):
        for name, fn in self.originals.items():
            setattr(self.ops, name, fn)

    def _timed(self, name, fn):
        def timed(*args, **kwargs):
            cuda.synchronize()
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            launched = time.perf_counter()
            cuda.synchronize()
            self.calls[name] += 1
            self.launch_s[name] += launched - start
            self.total_s[name] += time.perf_counter() - start
            return result
        return timed

    def table(self, per: int, unit: str) -> str:
        rows = [f"  {'op':22s} {'calls':>7s} {'launch ms':>10s} {'total ms':>10s}   (per {unit})"]
        for name, total in self.total_s.most_common():
            rows.append(f"  {name:22s} {self.calls[name] / per:7.1f} {1e3 * self.launch_s[name] / per:10.3f} "
                        f"{1e3 * total / per:10.3f}")
        rows.append(f"  {'all ops':22s} {sum(self.calls.values()) / per:7.1f} "
                    f"{1e3 * sum(self.launch_s.values()) / per:10.3f} {1e3 * sum(self.total_s.values()) / per:10.3f}")
        return "\n".join(rows)


def run_to_end(engine) -> None:
    while engine.has_unfinished():
        engine.step()


def profile_prefill(engine, ops, num_tokens: int) -> None:
    prompt = [1] + np.random.default_rng(0).integers(3, engine.hparams.vocab_size, num_tokens - 1).tolist()
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=1))
    run_to_end(engine)  # warm-up: kernels compiled for these shapes
    engine.add_request(prompt[::-1], SamplingParams(temperature=0.0, max_tokens=1))
    cuda.synchronize()
    start = time.perf_counter()
    run_to_end(engine)
    cuda.synchronize()
    print(f"prefill of {num_tokens} tokens, unwrapped: {1e3 * (time.perf_counter() - start):.1f} ms")
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=1))
    with OpTimer(ops) as timer:
        run_to_end(engine)
    print(timer.table(1, "prefill"))


def graphed_decode_ms(path: Path, steps: int) -> None:
    """The engine's decode step as it runs by default: a lone sequence replays its captured CUDA graph."""
    engine = LLMEngine(EngineConfig(str(path), ctx_size=1024, backend="cuda"))
    engine.add_request([1, 100, 200, 300], SamplingParams(temperature=0.0, max_tokens=2 * steps + 4))
    for _ in range(steps + 2):  # prefill, capture, the checked first replay
        engine.step()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    graphed = engine.runner.graphed_decode
    state = ("off (see the warning)" if graphed is None or graphed.disabled
             else "run eagerly (simulator)" if SIMULATED else "replayed")
    print(f"engine decode step, CUDA graph {state}: {1e3 * (time.perf_counter() - start) / steps:.2f} ms")
    run_to_end(engine)


def profile_decode(engine, ops, steps: int) -> None:
    engine.add_request([1, 100, 200, 300], SamplingParams(temperature=0.0, max_tokens=3 * steps + 4))
    for _ in range(steps + 2):  # prefill and warm-up
        engine.step()
    cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    cuda.synchronize()
    print(f"eager decode step, unwrapped: {1e3 * (time.perf_counter() - start) / steps:.2f} ms")
    with OpTimer(ops) as timer:
        for _ in range(steps):
            engine.step()
    print(timer.table(steps, "decode step"))
    run_to_end(engine)


@cuda.jit
def empty_kernel(x):
    pass


def launch_cost(count: int = 2000) -> None:
    x = cuda.device_array(1, np.float32)
    empty_kernel[1, 32](x)
    cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        empty_kernel[1, 32](x)
    host = time.perf_counter() - start
    cuda.synchronize()
    print(f"empty kernel from Python: {1e6 * host / count:.1f} us a launch (host), "
          f"{1e6 * (time.perf_counter() - start) / count:.1f} us with the device")


def lm_head_bandwidth(engine, ops, repeats: int = 20) -> None:
    weight = ops.upload_weight(engine.model.lm_head)
    for num_tokens in (1, 8):
        x = cuda.to_device(np.ones((num_tokens, weight.row_length), np.float32))
        ops.linear(x, weight)
        cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            ops.linear(x, weight)
        cuda.synchronize()
        seconds = (time.perf_counter() - start) / repeats
        print(f"LM head mat-vec {weight.num_rows}x{weight.row_length} ({weight.nbytes / 1e6:.0f} MB), "
              f"{num_tokens} token(s): {1e3 * seconds:.3f} ms = {weight.nbytes / seconds / 1e9:.1f} GB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path)
    source.add_argument("--gemma-shaped", type=Path, metavar="DIR")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    path = args.model or write_gemma_shaped(args.gemma_shaped)
    ops = get_ops("cuda")
    launch_cost(50 if SIMULATED else 2000)
    engine = LLMEngine(EngineConfig(str(path), ctx_size=1024, backend="cuda", cuda_graph=False))  # op by op
    lm_head_bandwidth(engine, ops, 1 if SIMULATED else 20)
    profile_decode(engine, ops, 2 if SIMULATED else args.steps)
    profile_prefill(engine, ops, 8 if SIMULATED else args.prompt_tokens)
    graphed_decode_ms(path, 2 if SIMULATED else args.steps)


if __name__ == "__main__":
    main()
