"""FP8 E4M3 weights on the CPU, dequantized on the fly: the weight bytes stay 1 per value.

Decode (one token): a fused pass per row, each 1-byte code looked up in a 256-entry float32 table, one scale
multiply per block of columns. Prefill: a tile of rows is decoded to float32 and multiplied with BLAS.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from gguf_loader.fp8_layout import E4M3_TABLE
from gguf_loader.weight_tensor import WeightTensor

TILE_BYTES = 512 * 1024  # float32 bytes per decoded prefill tile (as matmul.py)


@njit(cache=True, nogil=True)
def _decode_row_into(row, r, scales, block_rows, block_cols, table, out):
    """out[:] = row `r` (uint8 codes) as float32 times its block scales."""
    scale_row = scales[r // block_rows]
    for c in range(row.size):
        out[c] = table[row[c]] * scale_row[c // block_cols]


@njit(cache=True, parallel=True, fastmath=True)
def fp8_matvec_into(data, scales, block_rows, block_cols, table, x, out):
    """out[t, r] = sum_c table[data[r, c]] * scale(r, c) * x[t, c]."""
    num_rows, num_cols = data.shape
    for r in prange(num_rows):
        scale_row = scales[r // block_rows]
        for t in range(x.shape[0]):
            total = np.float32(0.0)
            for start in range(0, num_cols, block_cols):
                stop = min(start + block_cols, num_cols)
                partial = np.float32(0.0)
                for c in range(start, stop):
                    partial += table[data[r, c]] * x[t, c]
                total += partial * scale_row[start // block_cols]
            out[t, r] = total


@njit(cache=True, nogil=True)
def fp8_decode_rows_into(data, row_ids, scales, block_rows, block_cols, table, out):
    for i in range(row_ids.size):
        _decode_row_into(data[row_ids[i]], row_ids[i], scales, block_rows, block_cols, table, out[i])


def fp8_dequantize_rows(w: WeightTensor, row_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    row_ids = np.ascontiguousarray(row_ids, dtype=np.int64).reshape(-1)
    if out is None:
        out = np.empty((row_ids.size, w.row_length), dtype=np.float32)
    f = w.fp8
    fp8_decode_rows_into(np.asarray(w.data), row_ids, f.scales, f.block_rows, f.block_cols, E4M3_TABLE, out)
    return out


def fp8_linear(x: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """x: float32 [n, k], w: FP8 (m, k) -> float32 [n, m] = x @ W.T, never holding W in float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    data, f = np.asarray(w.data), w.fp8
    if x.ndim != 2 or x.shape[1] != data.shape[1]:
        raise ValueError(f"linear {w.name!r}: x has shape {x.shape}, expected [n, {data.shape[1]}]")
    if out is None:
        out = np.empty((x.shape[0], data.shape[0]), dtype=np.float32)
    if x.shape[0] == 1:
        fp8_matvec_into(data, f.scales, f.block_rows, f.block_cols, E4M3_TABLE, x, out)
        return out
    num_rows, row_length = data.shape
    tile_rows = int(min(num_rows, max(16, TILE_BYTES // (4 * row_length))))
    tile = np.empty((tile_rows, row_length), dtype=np.float32)
    for start in range(0, num_rows, tile_rows):
        stop = min(start + tile_rows, num_rows)
        rows = np.arange(start, stop, dtype=np.int64)
        fp8_decode_rows_into(data, rows, f.scales, f.block_rows, f.block_cols, E4M3_TABLE, tile[:stop - start])
        np.matmul(x, tile[:stop - start].T, out=out[:, start:stop])
    return out
