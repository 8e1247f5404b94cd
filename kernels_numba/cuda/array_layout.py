"""Moving activations and states around on the device without a host round trip: concatenation along rows or
columns, copies into existing arrays (recurrent-state slots, snapshots), zero fills and row repeats.

Each op is one grid-stride kernel writing a block of the destination; arrays are viewed as 2-D [rows, last axis].
"""
from __future__ import annotations

import numpy as np
from numba import config, cuda

from kernels_numba.cuda.device_arrays import as_device, empty
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream


@cuda.jit
def place_kernel(src, dst, first_row, first_col):
    """dst[first_row + t, first_col + c] = src[t, c] for every element of src [rows, cols]."""
    cols = src.shape[1]
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        t, c = i // cols, i % cols
        dst[first_row + t, first_col + c] = src[t, c]


@cuda.jit
def repeat_rows_kernel(x, times, out):
    """out[r, c] = x[r // times, c]: each row of x `times` times in a row (the MoE's token-major expert rows)."""
    cols = x.shape[1]
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        r, c = i // cols, i % cols
        out[r, c] = x[r // times, c]


def _rows(x):
    """x as a 2-D view [rows, last axis] (a 1-D array is one row)."""
    return x.reshape(1, x.shape[0]) if x.ndim == 1 else x.reshape(-1, tuple(x.shape)[-1])


def _place(src, dst, first_row: int, first_col: int) -> None:
    if src.size:
        place_kernel[flat_blocks(src.size), THREADS, current_stream()](src, dst, first_row, first_col)


def concat_columns(parts):
    """[T, n_i] arrays -> one [T, sum n_i] device array (np.concatenate(parts, axis=1))."""
    parts = [as_device(p) for p in parts]
    out = empty((parts[0].shape[0], sum(p.shape[1] for p in parts)), np.float32)
    first = 0
    for part in parts:
        _place(part, out, 0, first)
        first += part.shape[1]
    return out


def concat_rows(parts):
    """[n_i, ...] arrays of one trailing shape -> one [sum n_i, ...] device array (np.concatenate(parts))."""
    parts = [as_device(p) for p in parts]
    trailing = tuple(parts[0].shape[1:])
    out = empty((sum(p.shape[0] for p in parts), *trailing), np.float32)
    out_rows, first = _rows(out), 0
    for part in parts:
        if not part.shape[0]:  # nothing to place (and no -1 to infer in a reshape)
            continue
        rows = _rows(part)
        _place(rows, out_rows, first, 0)
        first += rows.shape[0]
    return out


def copy_array(x):
    """A new device array equal to x (a snapshot of a state)."""
    x = as_device(x)
    out = empty(tuple(x.shape), np.float32)
    _place(_rows(x), _rows(out), 0, 0)
    return out


def assign(dst, src) -> None:
    """dst[...] = src for a C-contiguous device array dst (a state slot) and src of its shape."""
    src = as_device(src)
    if tuple(src.shape) != tuple(dst.shape):
        raise ValueError(f"assign: source shape {tuple(src.shape)} != destination shape {tuple(dst.shape)}")
    _place(_rows(src), _rows(dst), 0, 0)


def fill_zeros(dst) -> None:
    """dst[...] = 0 for a C-contiguous device array (a memset on a GPU)."""
    if not dst.size:
        return
    if config.ENABLE_CUDASIM:
        dst.copy_to_device(np.zeros(dst.shape, dtype=dst.dtype))
        return
    from numba.cuda.cudadrv.driver import device_memset

    device_memset(dst, 0, dst.nbytes)


def repeat_rows(x, times: int):
    """Each row of x [T, D] `times` times in a row -> [T * times, D] (np.repeat(x, times, axis=0))."""
    x = as_device(x)
    out = empty((x.shape[0] * times, x.shape[1]), np.float32)
    if out.size:
        repeat_rows_kernel[flat_blocks(out.size), THREADS, current_stream()](x, int(times), out)
    return out
