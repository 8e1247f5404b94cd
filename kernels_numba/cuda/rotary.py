"""Rotary position embedding on the device: one thread per rotated pair; angles in float64 (long contexts)."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty, parameter
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream

_NO_FACTORS = np.ones(1, dtype=np.float32)


@cuda.jit
def rope_kernel(x, positions, theta, is_neox, freq_scale, freq_factors, has_factors, out):
    """x, out: [n, heads, head_dim] (out may alias x: each thread reads its pair before writing it)."""
    half = x.shape[2] // 2
    for i in range(cuda.grid(1), x.shape[0] * x.shape[1] * half, cuda.gridsize(1)):
        rotate_pair(x, positions, theta, is_neox, freq_scale, freq_factors, has_factors, out, i, half)


@cuda.jit(device=True)
def rotate_pair(x, positions, theta, is_neox, freq_scale, freq_factors, has_factors, out, i, half):
    pair, head, token = i % half, (i // half) % x.shape[1], i // (half * x.shape[1])
    inv_freq = theta ** (-2.0 * pair / x.shape[2])
    if has_factors:
        inv_freq = inv_freq / float(freq_factors[pair])
    angle = float(positions[token]) * freq_scale * inv_freq
    cos, sin = math.cos(angle), math.sin(angle)
    a, b = (pair, pair + half) if is_neox else (2 * pair, 2 * pair + 1)
    first, second = float(x[token, head, a]), float(x[token, head, b])
    out[token, head, a] = first * cos - second * sin
    out[token, head, b] = first * sin + second * cos


def rope(x, positions, theta, is_neox, freq_scale=1.0, freq_factors=None, out=None):
    """Rotate x: [n, heads, head_dim] by position; neox pairs (i, i + head_dim/2), normal pairs (2i, 2i+1)."""
    x = as_device(x)
    if not hasattr(positions, "copy_to_host"):
        positions = np.asarray(positions, dtype=np.int64)
    positions = as_device(positions, np.int64)
    result = empty(tuple(x.shape), np.float32, out)
    count = x.shape[0] * x.shape[1] * (x.shape[2] // 2)
    if count:
        factors = parameter(_NO_FACTORS if freq_factors is None else freq_factors)
        rope_kernel[flat_blocks(count), THREADS, current_stream()](
            x, positions, float(theta), bool(is_neox), float(freq_scale), factors, freq_factors is not None, result)
    return result
