"""The float32 fused mat-vec (dispatch.py's fused path) and the one-thread tiled fallback.

Decode (one token): one fused pass over the weight bytes (block_dot), row groups split across threads for big
matrices. Prefill (more tokens, dispatch.py's tiled path): rows are decoded a tile at a time into a float32 buffer
and multiplied with BLAS. OpenBLAS stays single-threaded: alternating numba's thread pool with OpenBLAS's (both
spin-wait between calls) made the tiled path 40x slower on 2 cores. Instead each numba thread decodes its own row
chunk's tiles and calls sgemm itself (tile_gemm.py); without a usable sgemm the tiles are decoded and multiplied
on the calling thread (untiled_matmul_into).
"""
from __future__ import annotations

import functools
import threading

import numpy as np
from numba import njit, prange, types

from kernels_numba.cpu.dequant import decode_rows_into
from kernels_numba.cpu.ir.native_call import handle_at, handles_array, native_kernel
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.quant_type import BF16, F16, F32
from kernels_numba.cpu.matvec.leaf_types import OUT_TYPE, WEIGHTS_TYPE
from kernels_numba.cpu.parallel_policy import PARALLEL_MIN_WORK, call_native_in_chunks, pool_chunks
from kernels_numba.cpu.ir.prefetch import prefetch_rows
from kernels_numba.cpu.matvec.row_dot import ROWS_PER_GROUP, dot_group_into

TILE_BYTES = 1024 * 1024  # float32 bytes per decoded tile: stays in L2 between decode and GEMM (512K-4M measured)
PREFETCH_ROWS_AHEAD = 4  # the fused matvec prefetches the next row group while it reads this one (measured best)

_buffers = threading.local()


@njit(cache=True, nogil=True, fastmath=SUM_FASTMATH, inline="always")
def matvec_groups_into(code, data, x, x_sums, out, first_group, stop_group, scratch):
    """out[t, r] = dot(row r of `data`, x[t]) for the rows of groups first_group..stop_group-1."""
    for group in range(first_group, stop_group):
        first_row = group * ROWS_PER_GROUP
        prefetch_rows(data, first_row + PREFETCH_ROWS_AHEAD, first_row + PREFETCH_ROWS_AHEAD + ROWS_PER_GROUP)
        dot_group_into(code, data, first_row, x, x_sums, scratch, out)


@functools.lru_cache(maxsize=None)
def fused_leaf(code: int):
    """The fused path's leaf for type `code`: matvec_groups_into over all row groups, split into `chunks`
    contiguous chunks across threads. `code` is a constant of this closure, so numba keeps only its type's dots
    (row_dot.py)."""
    scratch_length_per_value = 1 if code in (F32, F16, BF16) else 0  # float types decode a row into scratch first

    @njit(cache=True, nogil=True, parallel=True, fastmath=SUM_FASTMATH)
    def fused_rows_into(data, x, x_sums, out, chunks):
        num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
        groups_per_chunk = (num_groups + chunks - 1) // chunks
        for chunk in prange(chunks):
            scratch = np.empty(scratch_length_per_value * x.shape[1], dtype=np.float32)
            first = chunk * groups_per_chunk
            matvec_groups_into(code, data, x, x_sums, out, first, min(num_groups, first + groups_per_chunk), scratch)
    return fused_rows_into


def _reused_buffer(name: str, num_values: int) -> np.ndarray:
    """A per-thread float32 buffer of at least `num_values`, kept between calls."""
    buffer = getattr(_buffers, name, None)
    if buffer is None or buffer.size < num_values:
        buffer = np.empty(num_values, dtype=np.float32)
        setattr(_buffers, name, buffer)
    return buffer[:num_values]


@njit(cache=True)
def block_sums(code, x):
    """Sums of each run of 32 (Q2_K: 16) values of x: [n, k] for the types with a per-run minimum, else [n, 0]."""
    run_length = 16 if code == qt.Q2_K else 32
    has_min = code in (qt.Q4_1, qt.Q5_1, qt.Q4_K, qt.Q5_K, qt.Q2_K)  # the keys of qt.VALUES_PER_X_SUM
    sums = np.zeros((x.shape[0], x.shape[1] // run_length if has_min else 0), dtype=np.float32)
    for t in range(x.shape[0]):
        for run in range(sums.shape[1]):
            for j in range(run_length):
                sums[t, run] += x[t, run * run_length + j]
    return sums


def fused_kernel(code: int) -> np.ndarray:
    """The leaf handle (ir/native_call.py) of type `code`, as a [1, 2] handles array."""
    return handles_array([native_kernel(fused_leaf(code), (WEIGHTS_TYPE, OUT_TYPE, OUT_TYPE, OUT_TYPE, types.int64))])


@njit(cache=True)
def matvec_into(fused, code, data, x, out):
    """out = x @ data.T by the fused dot (x: [n, k], n up to max_fused_tokens), threads for big matrices only;
    fused: fused_kernel(code).

    Small ones still go through the parallel entry, with the pool limited to this thread: numba compiles a
    parallel loop body with noalias array arguments, and that code is 1.3-2.2x faster (Q8_0, Q4_K, Q5_0; measured)
    than the same kernel called as a plain njit function, where LLVM must assume `out` may alias the weights and
    x. Deciding here rather than in Python saves ~15 us of numba thread-count calls per mat-vec (decode: ~80 per
    token).
    """
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    chunks = pool_chunks(num_groups, data.shape[0] * x.shape[1], np.int64(PARALLEL_MIN_WORK))
    call_native_in_chunks(handle_at(fused, 0), (data, x, block_sums(code, x), out), chunks)


def untiled_matmul_into(code: int, data: np.ndarray, x: np.ndarray, out: np.ndarray, tile_rows: int) -> None:
    """out = x @ W.T on the calling thread, a decoded tile of rows at a time (no usable sgemm, or little work)."""
    row_length = x.shape[1]
    tile_buffer = _reused_buffer("tile", tile_rows * row_length)
    for start in range(0, data.shape[0], tile_rows):
        stop = min(start + tile_rows, data.shape[0])
        tile = tile_buffer[:(stop - start) * row_length].reshape(stop - start, row_length)
        decode_rows_into(code, data, np.arange(start, stop, dtype=np.int64), tile)
        np.matmul(x, tile.T, out=out[:, start:stop])
