"""numpy oracle for FP8 E4M3 weights (1 byte each, block-grid scales): dequantize and y = x @ W.T."""
import numpy as np

from gguf_loader.fp8_layout import E4M3_TABLE
from gguf_loader.weight_tensor import WeightTensor

ROWS_PER_SLICE = 256  # rows dequantized at a time by fp8_linear: the oracle never holds a whole weight in float


def fp8_dequantize_rows(w: WeightTensor, row_ids: np.ndarray) -> np.ndarray:
    """Rows `row_ids` of an FP8 weight as float32 [len(row_ids), cols]: table value times the block's scale."""
    row_ids = np.asarray(row_ids, dtype=np.int64).reshape(-1)
    f, codes = w.fp8, np.asarray(w.data)[row_ids]
    scales = np.repeat(f.scales[row_ids // f.block_rows], f.block_cols, axis=1)[:, :codes.shape[1]]
    return E4M3_TABLE[codes] * scales


def fp8_linear(x: np.ndarray, w: WeightTensor) -> np.ndarray:
    """x: [n, k] float32, w: FP8 [m, k] -> [n, m], accumulated in float64."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty((x.shape[0], w.num_rows), dtype=np.float64)
    for start in range(0, w.num_rows, ROWS_PER_SLICE):
        rows = np.arange(start, min(start + ROWS_PER_SLICE, w.num_rows))
        out[:, rows] = x @ fp8_dequantize_rows(w, rows).astype(np.float64).T
    return out.astype(np.float32)
