"""Dequantization ops: whole tensors, selected rows or embedding lookups to float32."""
import numpy as np
from numba import njit, prange

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.parallel_policy import use_threads
from kernels_numba.cpu.matvec.quant_type import type_code_of
from kernels_numba.cpu.matvec.row_decode import decode_row


@njit(cache=True, nogil=True)
def decode_rows_into(code, data, row_ids, out):
    """out[i] = row row_ids[i] of `data` (uint8 [rows, bytes_per_row]) decoded as type `code`."""
    for i in range(row_ids.size):
        decode_row(code, data[row_ids[i]], out[i])


@njit(cache=True, parallel=True)
def decode_rows_parallel_into(code, data, row_ids, out):
    for i in prange(row_ids.size):
        decode_row(code, data[row_ids[i]], out[i])


def readonly_bytes(w: WeightTensor) -> np.ndarray:
    """w.data as a read-only uint8 [rows, bytes_per_row] array, so every caller hits one numba specialisation."""
    data = np.asarray(w.data)
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return data


def dequantize_rows(w: WeightTensor, row_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rows `row_ids` of `w` as float32 [len(row_ids), row_length]."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels live in kernels_numba/cpu/matvec/fp8.py
        from kernels_numba.cpu.matvec.fp8 import fp8_dequantize_rows
        return fp8_dequantize_rows(w, row_ids, out)
    code = type_code_of(w)
    row_ids = np.ascontiguousarray(row_ids, dtype=np.int64).reshape(-1)
    if row_ids.size and (row_ids.min() < 0 or row_ids.max() >= w.num_rows):
        raise IndexError(f"row id out of range for {w.name!r} with {w.num_rows} rows")
    if out is None:
        out = np.empty((row_ids.size, w.row_length), dtype=np.float32)
    decode = decode_rows_parallel_into if use_threads(row_ids.size * w.row_length) else decode_rows_into
    decode(code, readonly_bytes(w), row_ids, out)
    return out


def dequantize(w: WeightTensor) -> np.ndarray:
    """All of `w` as float32 of shape w.shape (meant for small tensors such as norm weights)."""
    return dequantize_rows(w, np.arange(w.num_rows, dtype=np.int64)).reshape(w.shape)


def embedding(token_ids: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """Token embedding lookup, float32 [n, dim]: row token_ids[i] of the (possibly quantized) matrix `w`."""
    return dequantize_rows(w, token_ids, out=out)
