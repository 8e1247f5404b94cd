"""numpy oracle for FP8 E4M3 weights (1 byte each, block-grid scales): dequantize and y = x @ W.T."""
import numpy as np

from gguf_loader.fp8_layout import dequantize_fp8
from gguf_loader.weight_tensor import WeightTensor


def fp8_dequantize_rows(w: WeightTensor, row_ids: np.ndarray) -> np.ndarray:
    """Rows `row_ids` of an FP8 weight as float32 [len(row_ids), cols]."""
    row_ids = np.asarray(row_ids, dtype=np.int64).reshape(-1)
    full = dequantize_fp8(np.asarray(w.data), w.fp8)  # small models only: the oracle favours clarity
    return full[row_ids]


def fp8_linear(x: np.ndarray, w: WeightTensor) -> np.ndarray:
    """x: [n, k] float32, w: FP8 [m, k] -> [n, m], accumulated in float64."""
    weights = dequantize_fp8(np.asarray(w.data), w.fp8).astype(np.float64)
    return (np.asarray(x, dtype=np.float64) @ weights.T).astype(np.float32)
