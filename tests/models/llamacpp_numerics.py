"""Wraps an ops module so its arithmetic rounds where llama.cpp's CPU backend rounds.

Used only in tests, to show that a quantized tiny model matches llama.cpp to float32 precision once the two
known rounding points are reproduced: llama.cpp quantizes mat-vec activations to Q8_0 blocks for Q4_0/Q5_0/Q8_0
weights and to fp16 for F16 weights, and evaluates GELU through an fp16 lookup table.
"""
from __future__ import annotations

import numpy as np

Q8_0_BLOCK = 32
Q8_ACTIVATION_TYPES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}


def round_to_q8_0(x: np.ndarray) -> np.ndarray:
    """x: [n, k] -> x quantized to Q8_0 blocks of 32 and back (scale stored as fp16, as ggml does)."""
    n, k = x.shape
    blocks = x.reshape(n, k // Q8_0_BLOCK, Q8_0_BLOCK).astype(np.float32)
    scale = (np.abs(blocks).max(axis=-1, keepdims=True) / 127).astype(np.float32)
    safe = np.where(scale > 0, scale, 1)
    q = np.where(scale > 0, np.round(blocks / safe), 0)
    return (q * scale.astype(np.float16).astype(np.float32)).reshape(n, k).astype(np.float32)


class LlamaCppNumerics:
    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        return getattr(self._ops, name)

    def linear(self, x, w, out=None):
        if w.type_name in Q8_ACTIVATION_TYPES:
            x = round_to_q8_0(np.asarray(x, np.float32))
        elif w.type_name == "F16":
            x = np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
        return self._ops.linear(np.ascontiguousarray(x), w)

    def gelu_mul(self, gate, up, out=None):
        gate16 = gate.astype(np.float16).astype(np.float32)
        act = self._ops.gelu_tanh(gate16).astype(np.float16).astype(np.float32)
        act = np.where(gate <= -10, 0, np.where(gate >= 10, gate, act))
        if out is None:
            return (act * up).astype(np.float32)
        np.multiply(act, up, out=out)  # the ops' signature: the model may ask for the result in place of gate
        return out
