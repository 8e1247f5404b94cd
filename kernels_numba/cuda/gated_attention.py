"""The gated full-attention layer's ops on the device: the sigmoid output gate and RoPE on the first rotary_dim
dims of each head. Same signatures as reference_gated_attention.py."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.activation import sigmoid_value
from kernels_numba.cuda.device_arrays import as_device, empty
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream


@cuda.jit
def sigmoid_mul_kernel(x, gate, out):
    """out[t, c] = x[t, c] * sigmoid(gate[t, c // (cols / gate cols)]): a gate per value, or one per row."""
    cols = x.shape[1]
    per_gate = cols // gate.shape[1]
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        t, c = i // cols, i % cols
        out[t, c] = x[t, c] * sigmoid_value(gate[t, c // per_gate])


@cuda.jit
def partial_rope_kernel(x, positions, theta, rotary_dim, out):
    """NeoX pairs (i, i + rotary_dim/2) of each head rotated at theta^(-2i/rotary_dim), angles in float64;
    dims from rotary_dim on copied."""
    tokens, heads, head_dim = x.shape
    half = rotary_dim // 2
    for i in range(cuda.grid(1), tokens * heads * half, cuda.gridsize(1)):
        pair, head, token = i % half, (i // half) % heads, i // (half * heads)
        angle = float(positions[token]) * theta ** (-2.0 * pair / rotary_dim)
        cos, sin = math.cos(angle), math.sin(angle)
        first, second = float(x[token, head, pair]), float(x[token, head, pair + half])
        out[token, head, pair] = first * cos - second * sin
        out[token, head, pair + half] = first * sin + second * cos
    rest = head_dim - rotary_dim
    for i in range(cuda.grid(1), tokens * heads * rest, cuda.gridsize(1)):
        dim, head, token = rotary_dim + i % rest, (i // rest) % heads, i // (rest * heads)
        out[token, head, dim] = x[token, head, dim]


def sigmoid_mul(x, gate):
    """x: [T, n] times sigmoid(gate) with gate [T, n] or [T, 1] -> device array [T, n]."""
    x, gate = as_device(x), as_device(gate)
    if x.shape[0] != gate.shape[0] or x.shape[1] % gate.shape[1]:
        raise ValueError(f"sigmoid_mul: gate shape {tuple(gate.shape)} does not fit x {tuple(x.shape)}")
    out = empty(tuple(x.shape), np.float32)
    if x.size:
        sigmoid_mul_kernel[flat_blocks(x.size), THREADS, current_stream()](x, gate, out)
    return out


def rope_partial(x, positions, theta, rotary_dim: int):
    """x: [T, heads, head_dim] with NeoX RoPE on its first rotary_dim dims -> a new device array."""
    x = as_device(x)
    if rotary_dim % 2 or not 0 < rotary_dim <= x.shape[2]:
        raise ValueError(f"rope_partial: rotary_dim {rotary_dim} must be even and within head_dim {x.shape[2]}")
    if not hasattr(positions, "copy_to_host"):
        positions = np.asarray(positions, dtype=np.int64)
    positions = as_device(positions, np.int64)
    out = empty(tuple(x.shape), np.float32)
    if x.size:
        partial_rope_kernel[flat_blocks(x.size // 2), THREADS, current_stream()](
            x, positions, float(theta), int(rotary_dim), out)
    return out
