"""rms_norm on the device: one warp per row (sum of squares by warp shuffles)."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty, parameter
from kernels_numba.cuda.launch_shape import WARPS_PER_BLOCK, row_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.warp_reduce import WARP_SIZE, warp_sum



@cuda.jit
def rms_norm_kernel(x, weight, eps, out):
    """x, out: [rows, dim]; out may alias x (each warp reads its row fully before writing)."""
    first_row = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // WARP_SIZE
    for row in range(first_row, x.shape[0], cuda.gridDim.x * WARPS_PER_BLOCK):  # whole warps stride together
        normalize_row(x, weight, eps, out, row, cuda.threadIdx.x % WARP_SIZE)


@cuda.jit(device=True)
def normalize_row(x, weight, eps, out, row, lane):
    dim = x.shape[1]
    squares = np.float32(0.0)
    for j in range(lane, dim, WARP_SIZE):
        squares += x[row, j] * x[row, j]
    inv_rms = np.float32(1.0) / math.sqrt(warp_sum(squares) / np.float32(dim) + np.float32(eps))
    for j in range(lane, dim, WARP_SIZE):
        out[row, j] = x[row, j] * inv_rms * weight[j]


def rms_norm(x, weight, eps, out=None):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis; x: [..., dim] -> device array of x's shape."""
    x = as_device(x)
    shape = tuple(x.shape)
    rows = x.reshape(-1, shape[-1])
    result = empty(shape, np.float32, out)
    if rows.shape[0]:
        rms_norm_kernel[row_blocks(rows.shape[0]), WARPS_PER_BLOCK * WARP_SIZE,
                        current_stream()](rows, parameter(weight), np.float32(eps), result.reshape(rows.shape))
    return result
