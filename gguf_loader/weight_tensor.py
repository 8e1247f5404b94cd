"""A tensor as stored in a model file: still quantized, a zero-copy view of the mapped bytes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType


class RowShaped:
    """A weight read row by row: rows are all but the last axis of `shape`."""
    shape: tuple[int, ...]

    @property
    def num_rows(self) -> int:
        return int(np.prod(self.shape[:-1], dtype=np.int64)) if len(self.shape) > 1 else 1

    @property
    def row_length(self) -> int:
        return self.shape[-1]


@dataclass(frozen=True)
class WeightTensor(RowShaped):
    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]  # logical numpy-order shape, e.g. (out_features, in_features) for a linear weight
    data: np.ndarray  # uint8 [num_rows, bytes_per_row]: raw blocks of each row, zero-copy view of the file
    fp8: Any = None  # FP8 E4M3 weights (1 byte each, stored as I8): their gguf_loader.fp8_layout.FP8Scales
    # copies of data regrouped for one backend's kernels (kernels_numba/cpu/matvec/run_layout.py), made on first use
    cpu_layouts: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def type_name(self) -> str:
        return "F8_E4M3" if self.fp8 is not None else self.ggml_type.name

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


def bytes_per_row(ggml_type: GGMLQuantizationType, row_length: int) -> int:
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    if row_length % block_size:
        raise ValueError(f"row length {row_length} is not a multiple of the {ggml_type.name} block size {block_size}")
    return row_length // block_size * type_size


def make_weight_tensor(name: str, ggml_type: GGMLQuantizationType, shape: tuple[int, ...],
                       raw: np.ndarray) -> WeightTensor:
    """Wrap raw bytes (any uint8 buffer of the right size) as a WeightTensor of the given logical shape."""
    row_length = shape[-1]
    num_rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    data = np.asarray(raw).view(np.uint8).reshape(num_rows, bytes_per_row(ggml_type, row_length))
    return WeightTensor(name, GGMLQuantizationType(ggml_type), tuple(int(d) for d in shape), data)
