"""The array glue of the host backends (reference and cpu): the ops a model calls between its kernels (residual
adds, bias, column splits, concatenations), memory (zeros, to_device / to_host) and top-k, on numpy arrays.

kernels_numba.cuda has the same ops with the same signatures on device arrays, so a model calls them through
get_ops() and never asks where its arrays live. On the host numpy's own loops are the fast path for this glue (a
numba kernel would not beat `a + b`), so the CPU backend re-exports these functions, and they are the reference's
oracle for the CUDA kernels. On the host an array already is where the kernels compute: to_device, to_host and
upload_weight hand back what they are given.
"""
from __future__ import annotations

import mmap

import numpy as np

from gguf_loader.weight_tensor import WeightTensor

__all__ = ["MAX_TOP_K", "add", "add_bias", "scale", "split_columns", "concat_columns", "concat_rows", "repeat_rows",
           "stack_weights", "contiguous", "can_write_into", "copy_array", "assign", "fill_zeros", "zeros",
           "to_device", "to_host", "is_device_array", "upload_weight", "uploaded_bytes", "free_memory_bytes",
           "top_k", "top_k_on_device", "argmax"]  # re-exported by kernels_numba.reference and kernels_numba.cpu

MAX_TOP_K = 256  # the most candidates top_k_on_device returns on every backend (cuda's kernel bound)


# ---------------------------------------------------------------- arithmetic between ops

def add(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a + b (same shapes): the residual adds of the model."""
    return np.add(a, b, out=out)


def add_bias(y: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """y [T, n] + bias [n]; on the host written into y (a projection's fresh output) and returned."""
    y += bias
    return y


def scale(x: np.ndarray, factor: float, out: np.ndarray | None = None) -> np.ndarray:
    """x * factor in float32 (embedding scale)."""
    return np.multiply(x, np.float32(factor), out=out)


# ---------------------------------------------------------------- layout

def split_columns(y: np.ndarray, widths: tuple[int, ...]) -> list[np.ndarray]:
    """y: [T, sum(widths)] -> [T, width] each (column views on the host)."""
    return np.split(y, np.cumsum(widths)[:-1], axis=1)


def concat_columns(parts: list[np.ndarray]) -> np.ndarray:
    """[T, n_i] arrays -> one [T, sum n_i] array."""
    return np.concatenate(parts, axis=1)


def concat_rows(parts: list[np.ndarray]) -> np.ndarray:
    """[n_i, ...] arrays of one trailing shape -> one [sum n_i, ...] array."""
    return np.concatenate(parts)


def repeat_rows(x: np.ndarray, times: int) -> np.ndarray:
    """Each row of x [T, D] `times` times in a row -> [T * times, D]."""
    return np.repeat(x, times, axis=0)


def stack_weights(weights: tuple[WeightTensor, ...]) -> tuple[WeightTensor, ...]:
    """The weights as this backend multiplies them (projections of one input): on the host each on its own,
    straight from the file's pages (a stacked copy would hold them twice in memory, 43 MiB on Gemma 3 270M, for no
    measurable gain: one-token decode runs fused layers)."""
    return tuple(weights)


def contiguous(x: np.ndarray) -> np.ndarray:
    """x as a C-contiguous float32 array (x itself when it is one), as the kernels take their inputs."""
    return np.ascontiguousarray(x, dtype=np.float32)


def can_write_into(x) -> bool:
    """Whether an op may write its result into x: a fresh contiguous array of its own (not a view), so an
    elementwise op can work in place (a 512-token prefill holds 4 MiB less)."""
    return isinstance(x, np.ndarray) and x.flags.c_contiguous and x.flags.owndata and x.flags.writeable


def copy_array(x: np.ndarray) -> np.ndarray:
    """A new array equal to x (a snapshot of a state)."""
    return np.array(x)


def assign(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src (a state slot)."""
    dst[...] = src


def fill_zeros(dst: np.ndarray) -> None:
    """dst[...] = 0."""
    dst[...] = 0.0


# ---------------------------------------------------------------- memory

def zeros(shape, dtype=np.float32) -> np.ndarray:
    """Zeros in fresh anonymous pages, so a page joins the RSS only when it is written to: a KV cache is sized for
    the whole context but costs memory for what is used. (np.zeros can be served from reused heap memory, which
    calloc must clear: 4 of a 23 MiB cache were resident before any token.)"""
    count = int(np.prod(shape, dtype=np.int64))
    pages = mmap.mmap(-1, max(1, count * np.dtype(dtype).itemsize), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(pages, dtype=dtype, count=count).reshape(shape)


def to_device(x, dtype=np.float32):
    """x where the kernels compute: on the host, x itself (its dtype unchanged)."""
    return x


def to_host(x) -> np.ndarray:
    """x as a numpy array: x itself on the host."""
    return np.asarray(x)


def is_device_array(x) -> bool:
    """Whether x lives in a device's memory: never, on the host."""
    return False


def upload_weight(w: WeightTensor) -> WeightTensor:
    """The weight as the kernels read it: on the host, the loader's tensor itself (mapped from the file)."""
    return w


def uploaded_bytes() -> int:
    """Bytes of weights copied to a device: none on the host."""
    return 0


def free_memory_bytes() -> int | None:
    """Memory free for new arrays: MemAvailable from /proc/meminfo (what the kernel can hand out without
    swapping); None when unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# ---------------------------------------------------------------- top-k

def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits of each row and their token ids, best first (the lower id first among equal values):
    float32 and int64 [rows, k]."""
    logits = np.asarray(logits, dtype=np.float32)
    k = min(int(k), logits.shape[1])
    candidates = np.argpartition(-logits, k - 1, axis=1)[:, :k] if k < logits.shape[1] else None
    values, ids = [], []
    for row, row_logits in enumerate(logits):
        row_ids = _top_ids(row_logits, k, None if candidates is None else candidates[row])
        values.append(row_logits[row_ids])
        ids.append(row_ids)
    return (np.asarray(values, dtype=np.float32).reshape(len(logits), k),
            np.asarray(ids, dtype=np.int64).reshape(len(logits), k))


def _top_ids(row: np.ndarray, k: int, candidates: np.ndarray | None) -> np.ndarray:
    """The ids of row's k largest values, best first; ties at the k-th value go to the lowest ids."""
    if candidates is None:
        return np.lexsort((np.arange(row.size), -row))[:k]
    threshold = row[candidates].min()
    pool = np.flatnonzero(row >= threshold)  # every id tied at the threshold, so the lowest ones win
    return pool[np.lexsort((pool, -row[pool]))][:k]


def top_k_on_device(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """top_k where the logits are, float32 values and int32 ids [rows, k] (on the host: top_k)."""
    k = min(int(k), np.shape(logits)[1])
    if not 1 <= k <= MAX_TOP_K:
        raise ValueError(f"top_k_on_device supports 1 <= k <= {MAX_TOP_K}, got {k}")
    values, ids = top_k(logits, k)
    return values, ids.astype(np.int32)


def argmax(logits: np.ndarray) -> np.ndarray:
    """Greedy token of each row (first index among ties): int64 [rows]."""
    return np.argmax(np.asarray(logits), axis=1).astype(np.int64)
