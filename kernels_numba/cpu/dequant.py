"""Dequantization ops: whole tensors, selected rows or embedding lookups to float32."""
import functools

import numpy as np
from numba import njit, prange, types

from gguf_loader.private_bytes import private_rows
from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.ir.native_call import handle_at, handles_array, native_kernel
from kernels_numba.cpu.matvec.leaf_types import OUT_TYPE, ROW_IDS_TYPE, WEIGHTS_TYPE
from kernels_numba.cpu.parallel_policy import call_native_in_chunks, chunk_span, num_chunks, use_threads
from kernels_numba.cpu.matvec.quant_type import type_code_of
from kernels_numba.cpu.matvec.row_decode import decode_row


@njit(cache=True, nogil=True)
def decode_rows_into(code, data, row_ids, out):
    """out[i] = row row_ids[i] of `data` (uint8 [rows, bytes_per_row]) decoded as type `code`."""
    for i in range(row_ids.size):
        decode_row(code, data[row_ids[i]], out[i])


@functools.lru_cache(maxsize=None)
def decode_rows_leaf(code: int):
    """decode_rows_into for type `code` with the rows split into `chunks` chunks across threads (1: on the calling
    thread, numba's pool limited to it); `code` a constant of this closure, so only its decoder compiles."""
    @njit(cache=True, nogil=True, parallel=True)
    def decode_rows_parallel_into(data, row_ids, out, chunks):
        for chunk in prange(chunks):
            first, stop = chunk_span(chunk, chunks, row_ids.size)
            for i in range(first, stop):
                decode_row(code, data[row_ids[i]], out[i])
    return decode_rows_parallel_into


@functools.lru_cache(maxsize=None)
def decode_rows_kernel(code: int) -> np.ndarray:
    """The leaf handle (ir/native_call.py) of type `code`, as a [1, 2] handles array."""
    return handles_array([native_kernel(decode_rows_leaf(code), (WEIGHTS_TYPE, ROW_IDS_TYPE, OUT_TYPE, types.int64))])


@njit(cache=True)
def decode_rows_by_kernel(kernel, data, row_ids, out, chunks):
    """The row decode leaf of a type through its handle (decode_rows_kernel(code))."""
    call_native_in_chunks(handle_at(kernel, 0), (data, row_ids, out), chunks)


def _readonly(rows: np.ndarray) -> np.ndarray:
    """rows as a read-only array (a view where it is writable), so every caller hits one numba specialisation."""
    if rows.flags.writeable:
        rows = rows.view()
        rows.flags.writeable = False
    return rows


def decode_rows(code: int, data: np.ndarray, row_ids: np.ndarray, out: np.ndarray) -> None:
    """out[i] = row row_ids[i] of `data` (uint8 [rows, bytes_per_row], C-contiguous) decoded as type `code`, by its
    leaf kernel (out: float32 [len(row_ids), row_length], C-contiguous)."""
    ids = np.ascontiguousarray(row_ids, dtype=np.int64)
    decode_rows_by_kernel(decode_rows_kernel(code), _readonly(data), ids, out, 1)


def readonly_bytes(w: WeightTensor) -> np.ndarray:
    """w.data as a read-only uint8 [rows, bytes_per_row] array, so every caller hits one numba specialisation."""
    return _readonly(np.asarray(w.data))


def dequantize_rows(w: WeightTensor, row_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rows `row_ids` of `w` as float32 [len(row_ids), row_length]."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels live in kernels_numba/cpu/matvec/fp8.py
        from kernels_numba.cpu.matvec.fp8 import fp8_dequantize_rows
        return fp8_dequantize_rows(w, row_ids, out)
    row_ids = _checked_row_ids(w, row_ids)
    return _decoded_rows(type_code_of(w), readonly_bytes(w), row_ids, w.row_length, out)


def _checked_row_ids(w: WeightTensor, row_ids: np.ndarray) -> np.ndarray:
    row_ids = np.ascontiguousarray(row_ids, dtype=np.int64).reshape(-1)
    if row_ids.size and (row_ids.min() < 0 or row_ids.max() >= w.num_rows):
        raise IndexError(f"row id out of range for {w.name!r} with {w.num_rows} rows")
    return row_ids


def _decoded_rows(code: int, data: np.ndarray, row_ids: np.ndarray, row_length: int,
                  out: np.ndarray | None) -> np.ndarray:
    """Rows row_ids (checked) of read-only `data` decoded as type `code` into out (float32 [n, row_length])."""
    if out is None:
        out = np.empty((row_ids.size, row_length), dtype=np.float32)
    if not out.flags.c_contiguous:  # the leaf takes C-contiguous rows
        out[...] = _decoded_rows(code, data, row_ids, row_length, None)
        return out
    chunks = num_chunks(row_ids.size) if use_threads(row_ids.size * row_length) else 1
    decode_rows_by_kernel(decode_rows_kernel(code), data, row_ids, out, chunks)
    return out


def dequantize(w: WeightTensor) -> np.ndarray:
    """All of `w` as float32 of shape w.shape (meant for small tensors such as norm weights)."""
    return dequantize_rows(w, np.arange(w.num_rows, dtype=np.int64)).reshape(w.shape)


def embedding(token_ids: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """Token embedding lookup, float32 [n, dim]: row token_ids[i] of the (possibly quantized) matrix `w`. A mapped
    matrix's rows are read from the file (private_rows): through the mapping, a 512-token prompt made 107 MB of the
    default model's 178 MB table resident, beside the LM head's private copy of the same table."""
    if w.fp8 is None:
        row_ids = _checked_row_ids(w, token_ids)
        rows = private_rows(np.asarray(w.data), row_ids)
        if rows is not None:
            return _decoded_rows(type_code_of(w), _readonly(rows), np.arange(row_ids.size), w.row_length, out)
    return dequantize_rows(w, token_ids, out=out)
