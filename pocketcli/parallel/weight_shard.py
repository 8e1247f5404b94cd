"""A slice of a still-quantized WeightTensor: rows (a view of the file) or whole quant blocks of every row."""
from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES

from gguf_loader import WeightTensor, make_weight_tensor


def slice_rows(w: WeightTensor, start: int, stop: int) -> WeightTensor:
    """Rows [start, stop) of the second-to-last axis (of each expert, for a stacked (E, rows, cols) tensor)."""
    leading = int(np.prod(w.shape[:-2], dtype=np.int64))
    rows = w.data.reshape(leading, w.shape[-2], w.data.shape[-1])[:, start:stop]
    shape = w.shape[:-2] + (stop - start, w.shape[-1])
    return _shard(w, shape, rows)


def slice_columns(w: WeightTensor, start: int, stop: int) -> WeightTensor:
    """Columns [start, stop) of every row; start and stop fall on quant-block boundaries (ShardPlan checks)."""
    block, block_bytes = GGML_QUANT_SIZES[w.ggml_type]
    columns = w.data[:, start // block * block_bytes:stop // block * block_bytes]
    return _shard(w, w.shape[:-1] + (stop - start,), columns)


def _shard(w: WeightTensor, shape: tuple[int, ...], raw: np.ndarray) -> WeightTensor:
    raw = np.ascontiguousarray(raw)  # a view when the slice is contiguous (rows of a matrix), else a copy
    raw.flags.writeable = False
    return make_weight_tensor(w.name, w.ggml_type, shape, raw)  # same name: TensorParallelOps keys on it
