"""y = x @ W.T for quantized W without ever holding W in float32.

Decode (one token): one fused pass over the weight bytes (block_dot), row groups split across threads for big
matrices. Prefill (more tokens): rows are decoded a tile at a time into a float32 buffer and multiplied with BLAS.
OpenBLAS stays single-threaded: alternating numba's thread pool with OpenBLAS's (both spin-wait between calls)
made the tiled path 40x slower on 2 cores. Instead each numba thread decodes its own row chunk's tiles and calls
sgemm itself (tile_gemm.py); without a usable sgemm the tiles are decoded and multiplied on the calling thread.
"""
from __future__ import annotations

import os
import threading

import numba
import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu import parallel_policy
from kernels_numba.cpu.matvec.batch_dot import BATCH_CODES, MAX_BATCH_TOKENS, batch_matvec_into
from kernels_numba.cpu.matvec.blas import find_sgemm
from kernels_numba.cpu.dequant import decode_rows_into, readonly_bytes
from kernels_numba.cpu.matvec.int8_dot import INT8_DOT_IS_FAST, quantize_activations, round_activations
from kernels_numba.cpu.matvec.int8_matvec import INT8_CODES, int8_matvec_into, int8_matvec_quantized_into
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.parallel_policy import (CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, pool_threads, set_pool_threads,
                                                use_threads)
from kernels_numba.cpu.ir.prefetch import prefetch_rows
from kernels_numba.cpu.matvec.row_dot import ROWS_PER_GROUP, dot_group_into
from kernels_numba.cpu.matvec.run_layout import run_weights
from kernels_numba.cpu.matvec.run_matvec import run_activations, run_matvec_into, run_matvec_regrouped_into
from kernels_numba.cpu.matvec.tile_gemm import tiled_matmul_parallel

MAX_FUSED_TOKENS = 8  # measured after the register-accumulator kernels: fused beats tile decode + BLAS up to ~8 tokens (LM head n=4: 76 vs 92 ms)
TILE_BYTES = 1024 * 1024  # float32 bytes per decoded tile: stays in L2 between decode and GEMM (512K-4M measured)
# 8-bit activations, 4 tokens per pass (int8_dot.dot4x4): beats tile decode + BLAS up to ~48-64 tokens on the
# layers (one thread: Q5_0 2048x640 n=32 1.10 vs 1.62 ms, n=64 2.18 vs 2.05) and to ~128 on the Q8_0 LM head
MAX_INT8_TOKENS = 48
# the run dots (run_matvec.py) beat tile decode + BLAS up to ~64-128 tokens (two threads, Q5_0 2048x640 n=64:
# 1.7 vs 3.5 ms, n=512: 11.7 vs 13.5; Q6_K 640x2048 n=512: 18.4 vs 12.5)
MAX_RUN_TOKENS = 64
MAX_FUSED_TOKENS_PAIRED = 12  # Q8_0/Q5_0 dot token pairs: fused still wins at 9-12 (LM head n=9: 73 vs 208 ms)
PREFETCH_ROWS_AHEAD = 4  # the fused matvec prefetches the next row group while it reads this one (measured best)

# 8-bit activations where the CPU has integer dot instructions (int8_dot.py): ~2x the float kernels' rate and
# llama.cpp's numerics; without VNNI the float kernels are faster and exact
USE_INT8_DOT = INT8_DOT_IS_FAST
# weights regrouped for the run dots (run_layout.py) where the 8-bit dots run; POCKET_RUN_LAYOUT=0 keeps the GGUF
# order (A/B benchmarks of the two layouts)
USE_RUN_LAYOUT = USE_INT8_DOT and os.environ.get("POCKET_RUN_LAYOUT", "1") != "0"

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


@njit(cache=True)
def matvec_into(code, data, x, out):
    """out = x @ data.T by the fused dot (x: [n, k], n up to max_fused_tokens), threads for big matrices only.

    Small ones still go through the parallel entry, with the pool limited to this thread: numba compiles a
    parallel loop body with noalias array arguments, and that code is 1.3-2.2x faster (Q8_0, Q4_K, Q5_0; measured)
    than the same kernel called as a plain njit function, where LLVM must assume `out` may alias the weights and
    x. Deciding here rather than in Python saves ~15 us of numba thread-count calls per mat-vec (decode: ~80 per
    token).
    """
    if code >= qt.R_Q5_0:
        run_matvec_into(code, data, x, out)
        return
    if uses_int8_dot(code, x.shape[0]):
        int8_matvec_into(code, data, x, out)
        return
    x_sums = block_sums(code, x)
    threads = pool_threads()
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    is_parallel = threads > 1 and data.shape[0] * x.shape[1] >= PARALLEL_MIN_WORK
    # one call with a runtime chunk count: a literal 1 would compile the whole kernel a second time
    chunks = max(1, min(num_groups, CHUNKS_PER_THREAD * threads)) if is_parallel else 1
    if not is_parallel:
        set_pool_threads(1)
    matvec_parallel_into(code, data, x, x_sums, out, chunks)
    if not is_parallel:
        set_pool_threads(threads)


@njit(cache=True)
def shared_input_matvecs_into(codes, mats, first, x, outs):
    """outs[i] = x @ mats[first + i].T for each of outs (matvec_into's results bit for bit), with x quantized to 8
    bits once and regrouped once per run code in a row (q/k/v and gate/up read one input)."""
    num_tokens = x.shape[0]
    is_quantized = False
    for i in range(len(outs)):
        code = codes[first + i]
        is_quantized = is_quantized or code >= qt.R_Q5_0 or uses_int8_dot(code, num_tokens)
    quantized = quantize_activations(x if is_quantized else x[:0])  # no 8-bit dot: not needed
    quants, scales = quantized[0], quantized[1]
    regrouped_code = -1  # the run code `regrouped` holds; none yet (its first value only gives it a type)
    regrouped = run_activations(qt.R_Q5_0, quants[:0], scales[:0])
    for i in range(len(outs)):
        code, data = codes[first + i], mats[first + i]
        if code >= qt.R_Q5_0:
            if code != regrouped_code:
                regrouped, regrouped_code = run_activations(code, quants, scales), code
            run_matvec_regrouped_into(code, data, regrouped, outs[i])
        elif uses_int8_dot(code, num_tokens):
            int8_matvec_quantized_into(code, data, quantized, outs[i])
        else:
            matvec_into(code, data, x, outs[i])


def _tiled_matmul_into(code: int, data: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    num_rows, row_length = data.shape[0], x.shape[1]
    tile_rows = int(min(num_rows, max(16, TILE_BYTES // (4 * row_length))))
    sgemm = find_sgemm()
    if sgemm is not None and use_threads(x.shape[0] * num_rows * row_length):
        tiled_matmul_parallel(code, data, x, out, tile_rows, sgemm.address, sgemm.ilp64, numba.get_num_threads())
        return
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


@register_jitable
def uses_int8_dot(code: int, num_tokens: int) -> bool:
    """Whether linear runs the integer dots (each token the same dots whatever n, so bit-identical results);
    callable from Python and from njit code (matvec_into)."""
    return USE_INT8_DOT and code in INT8_CODES and num_tokens <= MAX_INT8_TOKENS


def cpu_operands(w: WeightTensor) -> tuple[int, np.ndarray]:
    """(code, read-only uint8 rows) the CPU kernels read for w: its run layout (run_layout.py) where the 8-bit
    dots run and the type has one, else its GGUF bytes and type code."""
    runs = run_weights(w) if USE_RUN_LAYOUT else None
    if runs is not None:
        return runs.code, runs.data
    return qt.type_code_of(w), readonly_bytes(w)


def max_fused_tokens(code: int) -> int:
    """Most tokens the fused mat-vec serves before tile decode + BLAS wins (speculative verify sends k+1)."""
    if code >= qt.R_Q5_0:
        return MAX_RUN_TOKENS
    if uses_int8_dot(code, 1):
        return MAX_INT8_TOKENS
    return MAX_FUSED_TOKENS_PAIRED if code == qt.Q8_0 or code == qt.Q5_0 else MAX_FUSED_TOKENS


def linear(x: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """x: float32 [n, k], w: (m, k) -> float32 [n, m] = x @ W.T."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels live in kernels_numba/cpu/matvec/fp8.py
        from kernels_numba.cpu.matvec.fp8 import fp8_linear
        return fp8_linear(x, w, out)
    code, data = cpu_operands(w)  # data: [m, bytes_per_row]; its shape is cheaper to read than w.num_rows
    x = np.ascontiguousarray(x, dtype=np.float32)
    _check_shapes(x, w, data.shape[0], out)
    if out is None:
        out = np.empty((x.shape[0], data.shape[0]), dtype=np.float32)
    if code == qt.F32:
        np.matmul(x, data.view(np.float32).T, out=out)
    elif code >= qt.R_Q5_0 and x.shape[0] <= MAX_RUN_TOKENS:  # run layout (run_layout.py): 8-bit dots
        run_matvec_into(code, data, x, out)
    elif uses_int8_dot(code, x.shape[0]):
        int8_matvec_into(code, data, x, out)
    elif 2 <= x.shape[0] <= MAX_BATCH_TOKENS and code in BATCH_CODES:  # one decode for all tokens (batch_dot)
        batch_matvec_into(code, data, x, out, parallel_policy.PARALLEL_MIN_WORK)
    elif x.shape[0] <= max_fused_tokens(code):
        matvec_into(code, data, x, out)
    elif code >= qt.R_Q5_0 or USE_INT8_DOT and code in INT8_CODES:  # the 8-bit grid of the dots: paths agree
        _tiled_matmul_into(code, data, round_activations(x), out)
    else:
        _tiled_matmul_into(code, data, x, out)
    return out
