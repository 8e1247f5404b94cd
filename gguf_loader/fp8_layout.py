"""FP8 E4M3 weights: 1 byte per weight (kept as ggml I8 bytes) plus float32 scales on a grid of blocks.

Every scale layout is one block grid: block-wise `weight_scale_inv` (e.g. 128x128, DeepSeek-V3 / Qwen3-FP8),
per-channel `weight_scale` [rows, 1] (blocks of 1 x cols), per-tensor `weight_scale` [] (one block).
The real weight is fp8_value * scales[row // block_rows, col // block_cols].

`input_scale` (compressed-tensors / fbgemm / FineGrainedFP8 "static" activation scheme) is the per-tensor scale a
W8A8 GPU kernel divides activations by before casting them to FP8. We carry it (and `pocket info` shows it) but
run weight-only FP8, activations in float32: what transformers does on a machine without an FP8 GPU (its
FineGrainedFP8 quantizer sets dequantize=True and drops the activation scales), so its CPU logits are our oracle.
On an FP8 GPU the static scheme would add one more rounding of the activations (to E4M3 at x / input_scale).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from .errors import ModelFileError

FP8_STORAGE_TYPE = GGMLQuantizationType.I8  # 1 byte per value; no kernel runs I8, so a missed hook fails loudly


def e4m3_table() -> np.ndarray:
    """float32 [256]: the value of each E4M3 (fn: no infinities, 0x7f/0xff are NaN) byte."""
    b = np.arange(256)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exponent, mantissa = (b >> 3) & 0xF, b & 0x7
    value = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6, (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    value = np.where((b & 0x7F) == 0x7F, np.nan, value)
    return (sign * value).astype(np.float32)


E4M3_TABLE = e4m3_table()


@dataclass(frozen=True)
class FP8Scales:
    scales: np.ndarray  # float32 [ceil(rows / block_rows), ceil(cols / block_cols)], C-contiguous
    block_rows: int
    block_cols: int
    layout: str  # "block", "channel" or "tensor" (for `pocket info`)
    input_scale: float | None = None  # static activation scale, carried not applied (see the module docstring)

    def describe(self) -> str:
        """e.g. "block 128x128", "channel", "tensor" (for `pocket info`)."""
        return f"block {self.block_rows}x{self.block_cols}" if self.layout == "block" else self.layout


def make_fp8_scales(name: str, scales: np.ndarray, shape: tuple[int, ...],
                    block_size: tuple[int, int] | None, input_scale: float | None = None) -> FP8Scales:
    """The block grid for a weight of `shape` [rows, cols] from its scale tensor (already float32)."""
    rows, cols = shape
    scales = np.asarray(scales, dtype=np.float32)
    if not np.all(np.isfinite(scales)):
        raise ModelFileError(f"tensor {name}: its FP8 scales hold NaN or infinity")
    if scales.size == 1:
        return FP8Scales(scales.reshape(1, 1).copy(), rows, cols, "tensor", input_scale)
    if scales.ndim in (1, 2) and scales.shape[0] == rows and scales.size == rows:
        return FP8Scales(np.ascontiguousarray(scales.reshape(rows, 1)), 1, cols, "channel", input_scale)
    if block_size is None:
        raise ModelFileError(f"tensor {name}: scale shape {list(scales.shape)} needs "
                             f"quantization_config.weight_block_size")
    block_rows, block_cols = block_size
    grid = (-(-rows // block_rows), -(-cols // block_cols))
    if scales.shape != grid:
        raise ModelFileError(f"tensor {name}: scale shape {list(scales.shape)} does not match {list(grid)} "
                             f"blocks of {block_rows}x{block_cols} for weight {list(shape)}")
    return FP8Scales(np.ascontiguousarray(scales), block_rows, block_cols, "block", input_scale)


def dequantize_fp8(raw: np.ndarray, fp8: FP8Scales) -> np.ndarray:
    """uint8 [rows, cols] E4M3 bytes -> float32 [rows, cols] (numpy reference)."""
    values = E4M3_TABLE[raw]
    rows, cols = raw.shape
    scale = np.repeat(np.repeat(fp8.scales, fp8.block_rows, axis=0), fp8.block_cols, axis=1)[:rows, :cols]
    return values * scale
