"""y = x @ W.T for quantized W without ever holding W in float32.

Decode (one token): one fused pass over the weight bytes (block_dot), row groups split across threads for big
matrices. Prefill (more tokens): rows are decoded a tile at a time into a reused float32 buffer and multiplied
with BLAS. The tile decode runs on the calling thread on purpose: alternating numba's thread pool with
OpenBLAS's (both spin-wait between calls) made the tiled path 40x slower on 2 cores.
"""
from __future__ import annotations

import threading

import numba
import numpy as np
from numba import njit, prange

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu import quant_type as qt
from kernels_numba.cpu.dequant import decode_rows_into, readonly_bytes
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.parallel_policy import num_chunks, use_threads
from kernels_numba.cpu.prefetch import prefetch_rows
from kernels_numba.cpu.row_dot import ROWS_PER_GROUP, dot_group_into

MAX_FUSED_TOKENS = 8  # measured after the register-accumulator kernels: fused beats tile decode + BLAS up to ~8 tokens (LM head n=4: 76 vs 92 ms)
TILE_BYTES = 512 * 1024  # float32 bytes per decoded tile: stays in L2 between decode and GEMM
MAX_FUSED_TOKENS_PAIRED = 12  # Q8_0/Q5_0 dot token pairs: fused still wins at 9-12 (LM head n=9: 73 vs 208 ms)
PREFETCH_ROWS_AHEAD = 4  # the fused matvec prefetches the next row group while it reads this one (measured best)

_buffers = threading.local()


@njit(cache=True, nogil=True, fastmath=SUM_FASTMATH)
def matvec_groups_into(code, data, x, x_sums, out, first_group, stop_group, scratch):
    """out[t, r] = dot(row r of `data`, x[t]) for the rows of groups first_group..stop_group-1."""
    for group in range(first_group, stop_group):
        first_row = group * ROWS_PER_GROUP
        prefetch_rows(data, first_row + PREFETCH_ROWS_AHEAD, first_row + PREFETCH_ROWS_AHEAD + ROWS_PER_GROUP)
        dot_group_into(code, data, first_row, x, x_sums, scratch, out)


@njit(cache=True, parallel=True)
def matvec_parallel_into(code, data, x, x_sums, out, chunks):
    """matvec_groups_into over all row groups, split into `chunks` contiguous chunks across threads."""
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    groups_per_chunk = (num_groups + chunks - 1) // chunks
    scratch_length = x.shape[1] if code in (qt.F32, qt.F16, qt.BF16) else 0
    for chunk in prange(chunks):
        scratch = np.empty(scratch_length, dtype=np.float32)
        first = chunk * groups_per_chunk
        matvec_groups_into(code, data, x, x_sums, out, first, min(num_groups, first + groups_per_chunk), scratch)


def _reused_buffer(name: str, num_values: int) -> np.ndarray:
    """A per-thread float32 buffer of at least `num_values`, kept between calls."""
    buffer = getattr(_buffers, name, None)
    if buffer is None or buffer.size < num_values:
        buffer = np.empty(num_values, dtype=np.float32)
        setattr(_buffers, name, buffer)
    return buffer[:num_values]


def _block_sums(x: np.ndarray, code: int) -> np.ndarray:
    """Sums of each run of 32 (Q2_K: 16) values of x (only the types with a per-run minimum use them)."""
    run_length = qt.VALUES_PER_X_SUM.get(code)
    if run_length is None:
        return np.zeros((x.shape[0], 0), dtype=np.float32)
    return x.reshape(x.shape[0], -1, run_length).sum(axis=-1, dtype=np.float32)


def _fused_matvec_into(code: int, data: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    x_sums = _block_sums(x, code)
    num_groups = -(-data.shape[0] // ROWS_PER_GROUP)
    if use_threads(data.shape[0] * x.shape[1]):
        matvec_parallel_into(code, data, x, x_sums, out, num_chunks(num_groups))
    else:
        # still the parallel entry, with the pool limited to this thread: numba compiles a parallel loop body with
        # noalias array arguments, and that code is 1.3-2.2x faster (Q8_0, Q4_K, Q5_0; measured) than the same
        # kernel called as a plain njit function, where LLVM must assume `out` may alias the weights and x
        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            matvec_parallel_into(code, data, x, x_sums, out, 1)
        finally:
            numba.set_num_threads(threads)


def _tiled_matmul_into(code: int, data: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    num_rows, row_length = data.shape[0], x.shape[1]
    tile_rows = int(min(num_rows, max(16, TILE_BYTES // (4 * row_length))))
    tile_buffer = _reused_buffer("tile", tile_rows * row_length)
    for start in range(0, num_rows, tile_rows):
        stop = min(start + tile_rows, num_rows)
        tile = tile_buffer[:(stop - start) * row_length].reshape(stop - start, row_length)
        decode_rows_into(code, data, np.arange(start, stop, dtype=np.int64), tile)
        np.matmul(x, tile.T, out=out[:, start:stop])


def _check_shapes(x: np.ndarray, w: WeightTensor, num_rows: int, out: np.ndarray | None) -> None:
    if x.ndim != 2 or x.shape[1] != w.shape[-1]:
        raise ValueError(f"linear {w.name!r}: x has shape {x.shape}, expected [n, {w.shape[-1]}]")
    expected = (x.shape[0], num_rows)
    if out is not None and (out.shape != expected or out.dtype != np.float32 or not out.flags.c_contiguous):
        raise ValueError(f"linear {w.name!r}: out must be C-contiguous float32 {expected}")


def max_fused_tokens(code: int) -> int:
    """Most tokens the fused mat-vec serves before tile decode + BLAS wins (speculative verify sends k+1)."""
    return MAX_FUSED_TOKENS_PAIRED if code == qt.Q8_0 or code == qt.Q5_0 else MAX_FUSED_TOKENS


def linear(x: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """x: float32 [n, k], w: (m, k) -> float32 [n, m] = x @ W.T."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels live in kernels_numba/cpu/fp8.py
        from kernels_numba.cpu.fp8 import fp8_linear
        return fp8_linear(x, w, out)
    code = qt.type_code_of(w)
    x = np.ascontiguousarray(x, dtype=np.float32)
    data = readonly_bytes(w)  # [m, bytes_per_row]; its shape is cheaper to read than w.num_rows
    _check_shapes(x, w, data.shape[0], out)
    if out is None:
        out = np.empty((x.shape[0], data.shape[0]), dtype=np.float32)
    if code == qt.F32:
        np.matmul(x, data.view(np.float32).T, out=out)
    elif x.shape[0] <= max_fused_tokens(code):
        _fused_matvec_into(code, data, x, out)
    else:
        _tiled_matmul_into(code, data, x, out)
    return out
