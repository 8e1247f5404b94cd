"""Element-wise activations: SiLU, tanh-approximated GELU, their gated products, and soft-capping.

Each op has a serial kernel over a flat range and runs it in parallel chunks only for big arrays, where the
thread wake-up pays off (decode-sized vectors stay on the calling thread).
"""
import math

import numpy as np
from numba import njit, prange

from kernels_numba.cpu.parallel_policy import num_chunks, use_threads

SILU, GELU_TANH, SOFTCAP = 0, 1, 2
PARALLEL_MIN_VALUES = 1 << 16  # exp/tanh per value: worth threads sooner than plain arithmetic
GELU_SQRT_2_OVER_PI = 0.7978845608028654
GELU_COEF_A = 0.044715


@njit(cache=True)
def activate(kind, value, cap):
    """One value through activation `kind` (cap only used by SOFTCAP); math in float32 like ggml."""
    if kind == SILU:
        return value / (np.float32(1.0) + np.float32(math.exp(-value)))
    if kind == GELU_TANH:
        inner = np.float32(GELU_SQRT_2_OVER_PI) * value * (np.float32(1.0) + np.float32(GELU_COEF_A) * value * value)
        return np.float32(0.5) * value * (np.float32(1.0) + np.float32(math.tanh(inner)))
    return cap * np.float32(math.tanh(value / cap))


@njit(cache=True, nogil=True)
def apply_range(kind, x, multiplier, cap, out, start, stop):
    """out[i] = activate(x[i]) (* multiplier[i] when multiplier is non-empty) for i in [start, stop)."""
    gated = multiplier.size > 0
    for i in range(start, stop):
        value = activate(kind, x[i], cap)
        out[i] = value * multiplier[i] if gated else value


@njit(cache=True, parallel=True)
def apply_parallel(kind, x, multiplier, cap, out, chunks):
    chunk = (x.size + chunks - 1) // chunks
    for c in prange(chunks):
        apply_range(kind, x, multiplier, cap, out, c * chunk, min(x.size, (c + 1) * chunk))


_NO_MULTIPLIER = np.zeros(0, dtype=np.float32)


def _apply(kind: int, x: np.ndarray, multiplier: np.ndarray | None, cap: float, out: np.ndarray | None):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if multiplier is not None:
        multiplier = np.ascontiguousarray(multiplier, dtype=np.float32)
        if multiplier.shape != x.shape:
            raise ValueError(f"gate shape {x.shape} and up shape {multiplier.shape} differ")
    if out is None:
        out = np.empty_like(x)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    flat_multiplier = _NO_MULTIPLIER if multiplier is None else multiplier.reshape(-1)
    cap32 = np.float32(cap)
    if use_threads(x.size, PARALLEL_MIN_VALUES):
        apply_parallel(kind, flat_x, flat_multiplier, cap32, flat_out, num_chunks(x.size))
    else:
        apply_range(kind, flat_x, flat_multiplier, cap32, flat_out, 0, x.size)
    return out


def silu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * sigmoid(x)."""
    return _apply(SILU, x, None, 0.0, out)


def gelu_tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), ggml's GELU."""
    return _apply(GELU_TANH, x, None, 0.0, out)


def silu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """silu(gate) * up (SwiGLU feed-forward)."""
    return _apply(SILU, gate, up, 0.0, out)


def gelu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """gelu_tanh(gate) * up (GeGLU feed-forward, Gemma)."""
    return _apply(GELU_TANH, gate, up, 0.0, out)


def softcap(x: np.ndarray, cap: float, out: np.ndarray | None = None) -> np.ndarray:
    """cap * tanh(x / cap)."""
    if cap <= 0:
        raise ValueError(f"softcap: cap must be positive, got {cap}")
    return _apply(SOFTCAP, x, None, cap, out)
