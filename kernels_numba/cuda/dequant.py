"""Dequantization on the device: whole weights, chosen rows, and embedding lookups (one thread per value)."""
from __future__ import annotations

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty
from kernels_numba.cuda.device_weight import upload_weight
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.value_decode import decode_value



@cuda.jit
def dequantize_rows_kernel(data, code, scales, block_rows, block_cols, row_ids, out):
    """out[i, j] = value j of row row_ids[i]."""
    for k in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        i, j = k // out.shape[1], k % out.shape[1]
        out[i, j] = decode_value(data, row_ids[i], j, code, scales, block_rows, block_cols)


def dequantize_rows(w, row_ids, out=None):
    """Rows `row_ids` of `w` as a float32 device array [len(row_ids), row_length]."""
    dw = upload_weight(w)
    if not hasattr(row_ids, "copy_to_host"):
        row_ids = np.asarray(row_ids, dtype=np.int32).reshape(-1)
    ids = as_device(row_ids, np.int32)
    out = empty((ids.shape[0], dw.row_length), np.float32, out)
    if ids.shape[0]:
        dequantize_rows_kernel[flat_blocks(out.size), THREADS, current_stream()](
            dw.data, dw.code, dw.scales, dw.block_rows, dw.block_cols, ids, out)
    return out


def dequantize(w):
    """All of `w` as a float32 device array of shape w.shape."""
    dw = upload_weight(w)
    return dequantize_rows(dw, np.arange(dw.num_rows, dtype=np.int32)).reshape(dw.shape)


def embedding(token_ids, w, out=None):
    """Embedding rows of `token_ids`: float32 device array [n, dim]."""
    return dequantize_rows(w, token_ids, out)
