"""Prefill mat-mul on every numba thread: each decodes its own tiles of weight rows and multiplies them (sgemm).

A tile is decoded into a per-thread float32 buffer right before the GEMM that reads it, so both run on the same
core while the tile is still in its L2. Row chunks are contiguous per thread; results go straight into their
columns of `out` (ldc = out's row length).
"""
import functools

import numpy as np
from numba import njit, prange, types

from kernels_numba.cpu.ir.native_call import call_native, handle_at, handles_array, native_kernel
from kernels_numba.cpu.matvec.blas import TRANS, sgemm
from kernels_numba.cpu.matvec.leaf_types import OUT_TYPE, WEIGHTS_TYPE
from kernels_numba.cpu.matvec.row_decode import decode_row

FLOAT_BYTES = 4


@njit(cache=True, nogil=True, inline="always")
def decode_and_multiply(code, data, x, out, first_row, stop_row, tile, sgemm_address, ilp64):
    """out[:, first_row:stop_row] = x @ rows.T, decoding the rows into `tile` [tile_rows, k] a tile at a time."""
    num_tokens, row_length = x.shape
    tile_rows = tile.shape[0]
    for start in range(first_row, stop_row, tile_rows):
        stop = min(start + tile_rows, stop_row)
        for r in range(start, stop):
            decode_row(code, data[r], tile[r - start])
        c_address = out.ctypes.data + start * FLOAT_BYTES
        sgemm(sgemm_address, ilp64, TRANS, num_tokens, stop - start, row_length, x.ctypes.data, row_length,
              tile.ctypes.data, row_length, np.float32(0.0), c_address, out.shape[1])


@functools.lru_cache(maxsize=None)
def tiled_leaf(code: int):
    """The tiled path's leaf for type `code`: out = x @ W.T for W = `data` decoded as `code`, its rows split into
    `chunks` contiguous chunks. `code` is a constant of this closure: numba keeps only its decoder (row_decode)."""
    @njit(cache=True, nogil=True, parallel=True)
    def tiled_rows_into(data, x, out, tile_rows, sgemm_address, ilp64, chunks):
        num_rows = data.shape[0]
        rows_per_chunk = (num_rows + chunks - 1) // chunks
        for chunk in prange(chunks):
            tile = np.empty((min(tile_rows, rows_per_chunk), x.shape[1]), dtype=np.float32)
            first = chunk * rows_per_chunk
            decode_and_multiply(code, data, x, out, first, min(num_rows, first + rows_per_chunk), tile,
                                sgemm_address, ilp64)
    return tiled_rows_into


def tiled_kernel(code: int) -> np.ndarray:
    """The leaf handle (ir/native_call.py) of type `code`, as a [1, 2] handles array."""
    return handles_array([native_kernel(tiled_leaf(code), (WEIGHTS_TYPE, OUT_TYPE, OUT_TYPE, types.int64, types.int64,
                                                           types.boolean, types.int64))])


@njit(cache=True, nogil=True)
def tiled_matmul_into(tiled, data, x, out, tile_rows, sgemm_address, ilp64, chunks):
    """The tiled leaf of `code` through its handle `tiled` (tiled_kernel(code))."""
    call_native(handle_at(tiled, 0), (data, x, out, tile_rows, sgemm_address, ilp64, chunks))
