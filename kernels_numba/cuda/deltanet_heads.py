"""The Gated DeltaNet layer's glue on the device: the per-head gates, key heads expanded to the value heads,
and the gated output norm. Same signatures as reference_deltanet.py (deltanet_gates, expand_heads,
gated_rms_norm)."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.activation import sigmoid_value, silu_value
from kernels_numba.cuda.device_arrays import as_device, empty, parameter
from kernels_numba.cuda.launch_shape import THREADS, WARPS_PER_BLOCK, flat_blocks, row_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.norm import normalize_row
from kernels_numba.cuda.warp_reduce import WARP_SIZE


@cuda.jit
def gates_kernel(b, alpha, a, dt_bias, g, beta):
    """g = a * softplus(alpha + dt_bias) (softplus as max(x, 0) + log1p(exp(-|x|)): no overflow), beta = sigmoid(b)."""
    heads = b.shape[1]
    for i in range(cuda.grid(1), b.size, cuda.gridsize(1)):
        t, h = i // heads, i % heads
        x = alpha[t, h] + dt_bias[h]
        g[t, h] = a[h] * (max(x, np.float32(0.0)) + math.log1p(math.exp(-abs(x))))
        beta[t, h] = sigmoid_value(b[t, h])


@cuda.jit
def expand_heads_kernel(x, grouped, scale, out):
    """out[t, j, c] = scale * x[t, key head of value head j, c]."""
    _, key_heads, dim = x.shape
    num_heads = out.shape[1]
    ratio = num_heads // key_heads
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        t, j, c = i // (num_heads * dim), (i // dim) % num_heads, i % dim
        source = j // ratio if grouped else j % key_heads
        out[t, j, c] = x[t, source, c] * scale


@cuda.jit
def gated_rms_norm_kernel(x, weight, z, eps, out):
    """One warp per row of x, z, out [rows, d_v]: RMSNorm(x) * weight, then times silu(z) lane by lane."""
    first_row = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // WARP_SIZE
    lane = cuda.threadIdx.x % WARP_SIZE
    for row in range(first_row, x.shape[0], cuda.gridDim.x * WARPS_PER_BLOCK):  # whole warps stride together
        normalize_row(x, weight, eps, out, row, lane)
        for j in range(lane, x.shape[1], WARP_SIZE):  # the lane's own columns: no other lane touches them
            out[row, j] *= silu_value(z[row, j])


def deltanet_gates(b, alpha, a, dt_bias):
    """b, alpha: [T, H], a, dt_bias: [H] -> (g, beta) device arrays [T, H]."""
    b, alpha = as_device(b), as_device(alpha)
    g, beta = empty(tuple(b.shape), np.float32), empty(tuple(b.shape), np.float32)
    if b.size:
        gates_kernel[flat_blocks(b.size), THREADS, current_stream()](b, alpha, parameter(a), parameter(dt_bias),
                                                                    g, beta)
    return g, beta


def expand_heads(x, num_heads: int, grouped: bool, scale: float = 1.0):
    """Key heads x: [T, H_k, d] -> [T, num_heads, d] (grouped: value head j reads key head j // ratio; tiled:
    j % H_k), times scale."""
    x = as_device(x)
    if num_heads % x.shape[1]:
        raise ValueError(f"expand_heads: {num_heads} heads is not a multiple of {x.shape[1]} key heads")
    out = empty((x.shape[0], num_heads, x.shape[2]), np.float32)
    if out.size:
        expand_heads_kernel[flat_blocks(out.size), THREADS, current_stream()](x, bool(grouped), np.float32(scale),
                                                                              out)
    return out


def gated_rms_norm(x, weight, z, eps):
    """RMSNorm(x) * weight * silu(z) over x's last axis (d_v); x: [..., d_v], z: x's size -> z's shape."""
    x, z = as_device(x), as_device(z)
    dim = tuple(x.shape)[-1]  # the simulator's shapes take no negative index
    if x.size != z.size:
        raise ValueError(f"gated_rms_norm: x has {x.size} values, z {z.size}")
    rows, z_rows = x.reshape(-1, dim), z.reshape(-1, dim)
    out = empty(tuple(z.shape), np.float32)
    if rows.shape[0]:
        gated_rms_norm_kernel[row_blocks(rows.shape[0]), WARPS_PER_BLOCK * WARP_SIZE, current_stream()](
            rows, parameter(weight), z_rows, np.float32(eps), out.reshape(rows.shape))
    return out
