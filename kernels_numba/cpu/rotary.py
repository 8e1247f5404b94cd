"""Rotary position embedding (llama.cpp's normal and neox pairings)."""
import math

import numpy as np
from numba import njit, prange

from kernels_numba.cpu.parallel_policy import num_chunks, use_threads


@njit(cache=True, nogil=True)
def rope_tokens_into(x, positions, inv_freq, is_neox, out, start, stop):
    """Rotate every head of tokens start..stop-1 of x: [n, heads, head_dim] by positions[t] * inv_freq[i].

    Angles and their cos/sin are computed in float64 once per token (positions can be large), the rotation in
    float32. Pairs: neox (i, i + head_dim/2), normal (2i, 2i+1). `out` may be `x`.
    """
    num_heads, half = x.shape[1], x.shape[2] // 2
    cos = np.empty(half, dtype=np.float32)
    sin = np.empty(half, dtype=np.float32)
    for t in range(start, stop):
        for i in range(half):
            angle = positions[t] * inv_freq[i]
            cos[i], sin[i] = math.cos(angle), math.sin(angle)
        for h in range(num_heads):
            for i in range(half):
                first, second = (i, i + half) if is_neox else (2 * i, 2 * i + 1)
                a, b = x[t, h, first], x[t, h, second]
                out[t, h, first] = a * cos[i] - b * sin[i]
                out[t, h, second] = a * sin[i] + b * cos[i]


@njit(cache=True, parallel=True)
def rope_parallel_into(x, positions, inv_freq, is_neox, out, chunks):
    tokens_per_chunk = (x.shape[0] + chunks - 1) // chunks
    for chunk in prange(chunks):
        start = chunk * tokens_per_chunk
        rope_tokens_into(x, positions, inv_freq, is_neox, out, start, min(x.shape[0], start + tokens_per_chunk))


def rope_inv_freq(head_dim: int, theta: float, freq_scale: float = 1.0,
                  freq_factors: np.ndarray | None = None) -> np.ndarray:
    """float64 [head_dim/2]: freq_scale * theta^(-2i/head_dim) / freq_factors[i]."""
    inv_freq = float(theta) ** (-2.0 * np.arange(head_dim // 2, dtype=np.float64) / head_dim) * freq_scale
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, dtype=np.float64)
    return inv_freq


def rope(x: np.ndarray, positions: np.ndarray, theta: float, is_neox: bool, freq_scale: float = 1.0,
         freq_factors: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Rotate x: [n, heads, head_dim] by position; returns a new array unless `out` (may be x) is given."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 3 or x.shape[-1] % 2:
        raise ValueError(f"rope: x must be [n, heads, even head_dim], got {x.shape}")
    positions = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    if positions.size != x.shape[0]:
        raise ValueError(f"rope: {positions.size} positions for {x.shape[0]} tokens")
    if freq_factors is not None and np.shape(freq_factors) != (x.shape[-1] // 2,):
        raise ValueError(f"rope: freq_factors must have shape ({x.shape[-1] // 2},)")
    if out is None:
        out = np.empty_like(x)
    inv_freq = rope_inv_freq(x.shape[-1], theta, freq_scale, freq_factors)
    if use_threads(x.size):
        rope_parallel_into(x, positions, inv_freq, bool(is_neox), out, num_chunks(x.shape[0]))
    else:
        rope_tokens_into(x, positions, inv_freq, bool(is_neox), out, 0, x.shape[0])
    return out
