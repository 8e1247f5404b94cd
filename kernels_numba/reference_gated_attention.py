"""The gated full-attention layer's own ops (Qwen3-Next, Qwen3.5) in plain numpy (float64): the output gate and
RoPE on the first rotary_dim dims of each head. The oracle for the cpu and cuda twins."""
from __future__ import annotations

import numpy as np


def sigmoid_mul(x: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """x * sigmoid(gate); x: [T, n], gate: [T, n] or [T, 1] (one gate per row, the shared expert's) -> float32."""
    gate64 = np.asarray(gate, dtype=np.float64)
    return (np.asarray(x, dtype=np.float64) / (1.0 + np.exp(-gate64))).astype(np.float32)


def rope_partial(x: np.ndarray, positions: np.ndarray, theta: float, rotary_dim: int) -> np.ndarray:
    """NeoX RoPE on dims [0, rotary_dim) of each head of x: [T, heads, head_dim]; the other dims pass unchanged.
    Frequencies are those of a rotary_dim-wide head: theta^(-2i / rotary_dim)."""
    from kernels_numba.reference import rope

    out = np.array(x, dtype=np.float32)
    out[..., :rotary_dim] = rope(np.ascontiguousarray(out[..., :rotary_dim]), positions, theta, True)
    return out
