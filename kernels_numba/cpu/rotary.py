"""Rotary position embedding (llama.cpp's normal and neox pairings)."""
import math

import numpy as np
from numba import njit, prange

from kernels_numba.cpu.parallel_policy import num_chunks, use_threads


@njit(cache=True, nogil=True)
def rope_tables(positions, inv_freq, start, stop):
    """(cos, sin) float32 [stop - start, head_dim/2] of the angles positions[t] * inv_freq[i], computed in float64
    (positions can be large): one table serves every head of a token, q's and k's alike."""
    half = inv_freq.size
    cos = np.empty((stop - start, half), dtype=np.float32)
    sin = np.empty((stop - start, half), dtype=np.float32)
    for t in range(start, stop):
        for i in range(half):
            angle = positions[t] * inv_freq[i]
            cos[t - start, i], sin[t - start, i] = math.cos(angle), math.sin(angle)
    return cos, sin


@njit(cache=True, nogil=True)
def rotate_tokens_into(x, cos, sin, is_neox, out, start, stop):
    """Rotate every head of tokens start..stop-1 of x: [n, heads, head_dim] by the angles of rope_tables (row
    t - start for token t), in float32. Pairs: neox (i, i + head_dim/2), normal (2i, 2i+1). `out` may be `x`: each
    head's rotation goes through scratch pairs, so the loops stay vectorised in place (LLVM's overlap check would
    send an aliased loop down its scalar path)."""
    num_heads, half = x.shape[1], x.shape[2] // 2
    first = np.empty(half, dtype=np.float32)
    second = np.empty(half, dtype=np.float32)
    for t in range(start, stop):
        c, s = cos[t - start], sin[t - start]
        for h in range(num_heads):
            head, head_out = x[t, h], out[t, h]
            if is_neox:
                for i in range(half):
                    a, b = head[i], head[i + half]
                    first[i] = a * c[i] - b * s[i]
                    second[i] = a * s[i] + b * c[i]
                for i in range(half):
                    head_out[i] = first[i]
                    head_out[i + half] = second[i]
            else:
                for i in range(half):
                    a, b = head[2 * i], head[2 * i + 1]
                    first[i] = a * c[i] - b * s[i]
                    second[i] = a * s[i] + b * c[i]
                for i in range(half):
                    head_out[2 * i] = first[i]
                    head_out[2 * i + 1] = second[i]


@njit(cache=True, nogil=True)
def rope_tokens_into(x, positions, inv_freq, is_neox, out, start, stop):
    """Rotate every head of tokens start..stop-1 of x: [n, heads, head_dim] by positions[t] * inv_freq[i]
    (rope_tables, then rotate_tokens_into). `out` may be `x`."""
    cos, sin = rope_tables(positions, inv_freq, start, stop)
    rotate_tokens_into(x, cos, sin, is_neox, out, start, stop)


@njit(cache=True, nogil=True, parallel=True)
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
