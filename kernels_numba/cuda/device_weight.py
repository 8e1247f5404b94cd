"""A weight on the device: its raw ggml blocks (or FP8 codes and scales), uploaded once and kept quantized."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda

from gguf_loader.weight_tensor import RowShaped, WeightTensor
from kernels_numba.quant_codes import TYPE_CODES
from kernels_numba.cuda.value_decode import FP8
from kernels_numba.errors import UnsupportedQuantType

SUPPORTED_TYPES = frozenset(TYPE_CODES)
_NO_SCALES = np.ones((1, 1), dtype=np.float32)


@dataclass(frozen=True)
class DeviceWeight(RowShaped):
    name: str
    shape: tuple[int, ...]
    code: int  # kernels_numba.quant_codes code, or value_decode.FP8
    data: object  # device uint8 [num_rows, bytes_per_row]
    scales: object  # device float32 FP8 scale grid ([1, 1] ones for ggml types)
    block_rows: int
    block_cols: int

    @property
    def nbytes(self) -> int:
        return int(self.data.size) + int(self.scales.size) * 4


_UPLOADED: dict[int, tuple[WeightTensor, DeviceWeight]] = {}  # id(host tensor) -> (tensor kept alive, upload)


def weight_code(w: WeightTensor) -> int:
    if w.fp8 is not None:
        return FP8
    code = TYPE_CODES.get(w.ggml_type)
    if code is None:
        raise UnsupportedQuantType(w.type_name, w.name, "cuda")
    return code


def upload_weight(w: WeightTensor) -> DeviceWeight:
    """The device copy of `w`, uploaded on first use only (later calls return the same buffers)."""
    if isinstance(w, DeviceWeight):
        return w
    cached = _UPLOADED.get(id(w))
    if cached is not None and cached[0] is w:
        return cached[1]
    code = weight_code(w)
    fp8 = w.fp8
    scales = _NO_SCALES if fp8 is None else fp8.scales
    uploaded = DeviceWeight(w.name, tuple(w.shape), code, cuda.to_device(np.ascontiguousarray(w.data)),
                            cuda.to_device(np.ascontiguousarray(scales, dtype=np.float32)),
                            1 if fp8 is None else fp8.block_rows, 1 if fp8 is None else fp8.block_cols)
    _UPLOADED[id(w)] = (w, uploaded)
    return uploaded


def uploaded_bytes() -> int:
    """Bytes of all weights uploaded so far (for `pocket info`)."""
    return sum(device.nbytes for _, device in _UPLOADED.values())
