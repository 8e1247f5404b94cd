"""Private copies of tensor bytes that leave a model file's mapping untouched.

Reading a tensor through the file mapping makes its pages (and, with the kernel's fault-around and large folios,
up to megabytes of neighbouring tensors) part of the process's resident memory for as long as the mapping
lives. Where a tensor is used only as a copy (a norm weight, a weight regrouped for a kernel) the copy is made
with plain file reads instead, so the weights are not resident twice.
"""
from __future__ import annotations

import mmap
import os

import numpy as np


def file_span(array: np.ndarray):
    """(file name, byte offset in the file, the mmap, byte offset in the mmap) of a C-contiguous array that is a
    view of a read-only np.memmap, else None."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    mapped = getattr(base, "_mmap", None)
    if base is None or not isinstance(mapped, mmap.mmap) or not array.flags.c_contiguous or not base.filename:
        return None
    mapping_start = np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    mapped_from = base.offset - base.offset % mmap.ALLOCATIONGRANULARITY
    return base.filename, mapped_from + array.ctypes.data - mapping_start, mapped, array.ctypes.data - mapping_start


def _fence_off(mapped: mmap.mmap, first: int, stop: int) -> None:
    """Give bytes first..stop of a mapping their own mapping area (madvise MADV_RANDOM on its whole pages): the
    kernel's fault-around, which maps the neighbours of a faulting page, stays inside one area, so reading a
    small tensor next door no longer makes this one resident."""
    page = mmap.PAGESIZE
    first_page, stop_page = -(-first // page) * page, stop // page * page
    if stop_page > first_page and hasattr(mmap, "MADV_RANDOM"):
        try:
            mapped.madvise(mmap.MADV_RANDOM, first_page, stop_page - first_page)
        except (OSError, ValueError):
            pass  # only a memory saving


def read_into(file, array: np.ndarray) -> bool:
    """Fill a C-contiguous array with the bytes at an unbuffered binary file's position; False where the file ends
    first."""
    view, done = memoryview(array.reshape(-1)).cast("B"), 0
    while done < len(view):
        count = file.readinto(view[done:])
        if not count:
            return False
        done += count
    return True


def private_bytes(array: np.ndarray) -> np.ndarray:
    """A private copy of a uint8 array. A view of a file mapping is read with plain file reads: touching the
    mapping would make its pages part of this process's resident memory (with the copy: twice the weights); the
    copied range is fenced off so that reads of its neighbours do not fault it in either."""
    span = file_span(array)
    if span is not None:
        copy = np.empty(array.shape, dtype=np.uint8)
        try:
            with open(span[0], "rb", buffering=0) as file:
                file.seek(span[1])
                is_whole = read_into(file, copy)
            if is_whole:
                _fence_off(span[2], span[3], span[3] + copy.size)
                return copy
        except OSError:
            pass  # read through the mapping instead
    return np.array(array, dtype=np.uint8)


def private_rows(array: np.ndarray, row_ids: np.ndarray) -> np.ndarray | None:
    """Rows row_ids (in range) of a uint8 [rows, bytes] view of a file mapping, read with plain file reads into a
    new [len(row_ids), bytes] array; None where the array is no such view or the file cannot be read. A lookup of
    scattered rows (embeddings) through the mapping makes far more than the rows resident: the kernel maps the
    large page-cache folios around each one (512 random rows of a 178 MB table: 107 MB)."""
    span = file_span(array)
    if span is None or array.ndim != 2:
        return None
    row_bytes = array.shape[1]
    rows = np.empty((len(row_ids), row_bytes), dtype=np.uint8)
    try:
        handle = os.open(span[0], os.O_RDONLY)
    except OSError:
        return None
    try:
        for i, row_id in enumerate(row_ids.tolist()):
            if os.preadv(handle, [rows[i]], span[1] + row_id * row_bytes) != row_bytes:
                return None
    except OSError:
        return None
    finally:
        os.close(handle)
    return rows
