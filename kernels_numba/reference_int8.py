"""Plain numpy oracle of the 8-bit-activation mat-vec (kernels_numba/cpu/matvec/int8_dot.py, int8_matvec.py).

x is rounded to 8 bits in blocks of 32 values (scale = max|x| / 127, like llama.cpp's Q8_0 activations) and then
multiplied exactly (float64) with the dequantized weights: the fast kernels differ from this only by float32
rounding, while both differ from the exact x @ W.T by the activation rounding.
"""
from __future__ import annotations

import numpy as np

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.reference import dequantize

BLOCK_VALUES = 32


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x: float32 [n, k] (k % 32 == 0) -> (quants int8 [n, k], scales float32 [n, k/32])."""
    blocks = np.asarray(x, dtype=np.float32).reshape(x.shape[0], -1, BLOCK_VALUES)
    scales = np.abs(blocks).max(axis=-1) / np.float32(127.0)
    safe = np.where(scales > 0, scales, np.float32(1.0))
    inverse = np.where(scales > 0, np.float32(1.0) / safe, np.float32(0.0)).astype(np.float32)
    quants = np.rint(blocks * inverse[..., None]).astype(np.int8)
    return quants.reshape(x.shape), scales.astype(np.float32)


def linear_int8_activations(x: np.ndarray, w: WeightTensor) -> np.ndarray:
    """x @ W.T with x rounded to 8 bits per block of 32 (float64 products) -> float32 [n, m]."""
    quants, scales = quantize_activations(x)
    rounded_x = quants.astype(np.float64) * np.repeat(scales.astype(np.float64), BLOCK_VALUES, axis=1)
    return (rounded_x @ dequantize(w).astype(np.float64).T).astype(np.float32)
