"""Private copies of tensor bytes that leave a model file's mapping untouched.

Reading a tensor through the file mapping makes its pages (and, with the kernel's fault-around and large folios,
up to megabytes of neighbouring tensors) part of the process's resident memory for as long as the mapping
lives. Where a tensor is used only as a copy (a norm weight, a weight regrouped for a kernel) the copy is made
with plain file reads instead, so the weights are not resident twice.
"""
from __future__ import annotations

import mmap

import numpy as np


def _file_span(array: np.ndarray):
    """(file name, byte offset) of a C-contiguous array that is a view of a read-only np.memmap, else None."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    mapped = getattr(base, "_mmap", None)
    if base is None or not isinstance(mapped, mmap.mmap) or not array.flags.c_contiguous or not base.filename:
        return None
    mapping_start = np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    mapped_from = base.offset - base.offset % mmap.ALLOCATIONGRANULARITY
    return base.filename, mapped_from + array.ctypes.data - mapping_start


def private_bytes(array: np.ndarray) -> np.ndarray:
    """A private copy of a uint8 array. A view of a file mapping is read with plain file reads: touching the
    mapping would make its pages part of this process's resident memory (with the copy: twice the weights), and
    handing them back (madvise) does not undo the kernel's fault-around."""
    span = _file_span(array)
    if span is not None:
        copy = np.empty(array.shape, dtype=np.uint8)
        try:
            with open(span[0], "rb", buffering=0) as file:
                file.seek(span[1])
                view, done = memoryview(copy.reshape(-1)), 0
                while done < copy.size:
                    count = file.readinto(view[done:])
                    if not count:
                        break
                    done += count
            if done == copy.size:
                return copy
        except OSError:
            pass  # read through the mapping instead
    return np.array(array, dtype=np.uint8)
