"""The Qwen3-Next / Qwen3.5 layers' glue ops on the CPU (numpy: each is one pass over a few small arrays, and
the numba kernels they call do the heavy part). Same signatures as reference_deltanet.py and
reference_gated_attention.py."""
from __future__ import annotations

import numpy as np

from kernels_numba.cpu.activation import silu
from kernels_numba.cpu.norm import rms_norm
from kernels_numba.cpu.rotary import rope


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def deltanet_gates(b: np.ndarray, alpha: np.ndarray, a: np.ndarray, dt_bias: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(g = a * softplus(alpha + dt_bias), beta = sigmoid(b)), float32 [T, H] each."""
    softplus = np.logaddexp(0.0, (alpha + dt_bias).astype(np.float64)).astype(np.float32)
    return a * softplus, _sigmoid(b)


def expand_heads(x: np.ndarray, num_heads: int, grouped: bool, scale: float = 1.0) -> np.ndarray:
    """Key heads [T, H_k, d] -> value heads [T, num_heads, d] (grouped: repeat; tiled: tile), times scale."""
    ratio = num_heads // x.shape[1]
    if scale != 1.0:
        x = x * np.float32(scale)
    return np.repeat(x, ratio, axis=1) if grouped else np.tile(x, (1, ratio, 1))


def gated_rms_norm(x: np.ndarray, weight: np.ndarray, z: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm(x) * weight * silu(z), norm over x's last axis; result in z's shape."""
    normed = rms_norm(np.reshape(x, (-1, np.shape(x)[-1])), weight, eps)
    return normed.reshape(np.shape(z)) * silu(z)


def sigmoid_mul(x: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """x * sigmoid(gate), gate [T, n] or [T, 1]."""
    return x * _sigmoid(gate)


def rope_partial(x: np.ndarray, positions: np.ndarray, theta: float, rotary_dim: int) -> np.ndarray:
    """NeoX RoPE on the first rotary_dim dims of each head of x: [T, heads, head_dim] (x is updated)."""
    x[..., :rotary_dim] = rope(np.ascontiguousarray(x[..., :rotary_dim]), positions, theta, True)
    return x
