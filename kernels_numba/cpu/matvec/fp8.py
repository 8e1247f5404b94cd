"""FP8 E4M3 weights on the CPU, dequantized on the fly: the weight bytes stay 1 per value.

Decode (1-12 tokens): the fused four-row kernels of fp8_dot, row groups split across threads for big matrices.
Prefill (more tokens): a tile of rows is decoded to float32 into a reused buffer and multiplied with BLAS, as
matmul.py does for the GGUF types; the tile decode runs on the calling thread for the same reason (numba's and
OpenBLAS's pools spin against each other). Weights whose scale blocks do not hold whole 32-column chunks (tiny
test models) always take the tile path, decoded through the 256-entry table. No float32 copy of a whole weight
is ever made: at most one tile of TILE_BYTES per thread.
"""
from __future__ import annotations

import threading

import numpy as np
from numba import njit, prange

from gguf_loader.fp8_layout import E4M3_TABLE
from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.cpu.matvec.fp8_decode import E4M3_DECODE_FACTOR, decode_e4m3x16
from kernels_numba.cpu.matvec.fp8_dot import CHUNK, ROWS_PER_GROUP, fast_layout, fp8_groups_into
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.matvec.dispatch import MAX_FP8_FUSED_TOKENS
from kernels_numba.cpu.parallel_policy import num_chunks, use_threads

TILE_BYTES = 512 * 1024  # float32 bytes per decoded prefill tile: stays in L2 between decode and GEMM

_buffers = threading.local()


@njit(cache=True, nogil=True)
def _decode_row_with_table(data, r, scales, block_rows, block_cols, table, out):
    """out[:] = row r (any block layout) as float32: a table lookup and a scale multiply per value."""
    scale_row = scales[r // block_rows]
    for c in range(data.shape[1]):
        out[c] = table[data[r, c]] * scale_row[c // block_cols]


@njit(cache=True, nogil=True, fastmath=SUM_FASTMATH)
def _decode_row_in_chunks(data, r, scales, block_rows, block_cols, out):
    """out[:] = row r as float32, 32 columns (one scale) at a time; needs whole chunks per scale block."""
    scale_row = scales[r // block_rows]
    num_chunks = data.shape[1] // CHUNK
    chunks_per_scale = num_chunks if scales.shape[1] == 1 else block_cols // CHUNK
    scale, block, next_block_at = scale_row[0] * np.float32(E4M3_DECODE_FACTOR), 0, chunks_per_scale
    for k in range(num_chunks):
        if k == next_block_at:
            block, next_block_at = block + 1, next_block_at + chunks_per_scale
            scale = scale_row[block] * np.float32(E4M3_DECODE_FACTOR)
        first = CHUNK * k
        decode_e4m3x16(out[first:first + 16], data, r, first)
        decode_e4m3x16(out[first + 16:first + CHUNK], data, r, first + 16)
        for j in range(CHUNK):
            out[first + j] *= scale


@njit(cache=True, nogil=True)
def fp8_decode_rows_into(data, row_ids, scales, block_rows, block_cols, table, out):
    """out[i] = row row_ids[i] of `data` (E4M3 bytes [rows, cols]) as float32."""
    in_chunks = data.shape[1] % CHUNK == 0 and (scales.shape[1] == 1 or block_cols % CHUNK == 0)
    for i in range(row_ids.size):
        if in_chunks:
            _decode_row_in_chunks(data, row_ids[i], scales, block_rows, block_cols, out[i])
        else:
            _decode_row_with_table(data, row_ids[i], scales, block_rows, block_cols, table, out[i])


# compiled once per process (~1.5 s): loaded from numba's cache, the parallel loop body ran 1.6-2x slower
@njit(cache=False, nogil=True, parallel=True)
def fp8_matvec_parallel_into(data, scales, block_rows, block_cols, x, out, chunks):
    """out[t, r] = dot(row r, x[t]) for every row, row groups split into `chunks` contiguous chunks."""
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    groups_per_chunk = (num_groups + chunks - 1) // chunks
    for chunk in prange(chunks):
        first = chunk * groups_per_chunk
        fp8_groups_into(data, scales, block_rows, block_cols, first, min(num_groups, first + groups_per_chunk), x, out)


def _reused_tile(num_values: int) -> np.ndarray:
    buffer = getattr(_buffers, "tile", None)
    if buffer is None or buffer.size < num_values:
        buffer = _buffers.tile = np.empty(num_values, dtype=np.float32)
    return buffer[:num_values]


def _fused_matvec_into(data: np.ndarray, w: WeightTensor, x: np.ndarray, out: np.ndarray) -> None:
    f = w.fp8
    num_groups = -(-data.shape[0] // ROWS_PER_GROUP)
    if use_threads(data.shape[0] * x.shape[1]):
        fp8_matvec_parallel_into(data, f.scales, f.block_rows, f.block_cols, x, out, num_chunks(num_groups))
    else:  # one thread: straight to the cached kernel, no parallel entry to compile
        fp8_groups_into(data, f.scales, f.block_rows, f.block_cols, 0, num_groups, x, out)


def _tiled_matmul_into(data: np.ndarray, w: WeightTensor, x: np.ndarray, out: np.ndarray) -> None:
    f = w.fp8
    num_rows, row_length = data.shape
    tile_rows = int(min(num_rows, max(16, TILE_BYTES // (4 * row_length))))
    tile_buffer = _reused_tile(tile_rows * row_length)
    for start in range(0, num_rows, tile_rows):
        stop = min(start + tile_rows, num_rows)
        tile = tile_buffer[:(stop - start) * row_length].reshape(stop - start, row_length)
        rows = np.arange(start, stop, dtype=np.int64)
        fp8_decode_rows_into(data, rows, f.scales, f.block_rows, f.block_cols, E4M3_TABLE, tile)
        np.matmul(x, tile.T, out=out[:, start:stop])


def fp8_dequantize_rows(w: WeightTensor, row_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rows `row_ids` of an FP8 weight as float32 [len(row_ids), cols]."""
    row_ids = np.ascontiguousarray(row_ids, dtype=np.int64).reshape(-1)
    if row_ids.size and (row_ids.min() < 0 or row_ids.max() >= w.num_rows):
        raise IndexError(f"row id out of range for {w.name!r} with {w.num_rows} rows")
    if out is not None and not (out.flags.c_contiguous and out.dtype == np.float32):
        out[...] = fp8_dequantize_rows(w, row_ids)  # the decode stores 16 contiguous floats at a time
        return out
    if out is None:
        out = np.empty((row_ids.size, w.row_length), dtype=np.float32)
    f = w.fp8
    fp8_decode_rows_into(readonly_bytes(w), row_ids, f.scales, f.block_rows, f.block_cols, E4M3_TABLE, out)
    return out


def fp8_linear(x: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """x: float32 [n, k], w: FP8 (m, k) -> float32 [n, m] = x @ W.T, never holding W in float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    data, f = readonly_bytes(w), w.fp8
    if x.ndim != 2 or x.shape[1] != data.shape[1]:
        raise ValueError(f"linear {w.name!r}: x has shape {x.shape}, expected [n, {data.shape[1]}]")
    expected = (x.shape[0], data.shape[0])
    if out is None:
        out = np.empty(expected, dtype=np.float32)
    elif out.shape != expected or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"linear {w.name!r}: out must be C-contiguous float32 {expected}")
    if x.shape[0] <= MAX_FP8_FUSED_TOKENS and fast_layout(data.shape[1], f.scales, f.block_rows, f.block_cols):
        _fused_matvec_into(data, w, x, out)
    else:
        _tiled_matmul_into(data, w, x, out)
    return out
