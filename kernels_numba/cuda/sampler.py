"""Sampling on the device: greedy argmax and top-k per logits row; only k (or 1) values per row come back.

One block per row; each thread scans a strided slice, then warps reduce by shuffles and warp leaders through
shared memory. Top-k takes k passes, each finding the best entry ranked below the previous pick (value
descending, index ascending), so it needs no scratch copy of the logits.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty
from kernels_numba.cuda.launch_shape import SAMPLER_WARPS as WARPS
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.warp_reduce import WARP_SIZE, warp_argmax

MAX_TOP_K = 256
THREADS = WARPS * WARP_SIZE


@cuda.jit(device=True)
def ranks_below(value, index, bound_value, bound_index):
    """Whether (value, index) comes after (bound_value, bound_index) in descending-value, ascending-index order."""
    return value < bound_value or (value == bound_value and index > bound_index)


@cuda.jit(device=True)
def block_best(logits, row, bound_value, bound_index, warp_values, warp_indices):
    """The best (value, index) of logits[row] ranked below the bound, known to every thread of the block."""
    best_value, best_index = np.float32(-math.inf), np.int32(2147483647)
    for j in range(cuda.threadIdx.x, logits.shape[1], THREADS):
        value = logits[row, j]
        if ranks_below(value, j, bound_value, bound_index) and (value > best_value or best_index == 2147483647):
            best_value, best_index = value, np.int32(j)
    best_value, best_index = warp_argmax(best_value, best_index)
    warp, lane = cuda.threadIdx.x // WARP_SIZE, cuda.threadIdx.x % WARP_SIZE
    if lane == 0:
        warp_values[warp], warp_indices[warp] = best_value, best_index
    cuda.syncthreads()
    best_value, best_index = warp_values[0], warp_indices[0]
    for w in range(1, WARPS):
        if warp_values[w] > best_value or (warp_values[w] == best_value and warp_indices[w] < best_index):
            best_value, best_index = warp_values[w], warp_indices[w]
    cuda.syncthreads()  # the shared slots are reused by the next pass
    return best_value, best_index


@cuda.jit
def top_k_kernel(logits, k, values, indices):
    """values, indices: [rows, k]; k == 1 is greedy argmax."""
    row = cuda.blockIdx.x
    warp_values = cuda.shared.array(WARPS, np.float32)
    warp_indices = cuda.shared.array(WARPS, np.int32)
    bound_value, bound_index = np.float32(math.inf), np.int32(-1)
    for rank in range(k):
        bound_value, bound_index = block_best(logits, row, bound_value, bound_index, warp_values, warp_indices)
        if cuda.threadIdx.x == 0:
            values[row, rank], indices[row, rank] = bound_value, bound_index


def top_k_on_device(logits, k: int):
    """logits: [rows, vocab] -> (values, indices) device arrays [rows, k], best first."""
    logits = as_device(logits)
    k = min(int(k), logits.shape[1])
    if not 1 <= k <= MAX_TOP_K:
        raise ValueError(f"cuda top_k supports 1 <= k <= {MAX_TOP_K}, got {k}")
    values, indices = empty((logits.shape[0], k), np.float32), empty((logits.shape[0], k), np.int32)
    if logits.shape[0]:
        top_k_kernel[logits.shape[0], THREADS, current_stream()](logits, k, values, indices)
    return values, indices


def top_k(logits, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits of each row and their token ids, on the host: [rows, k] each."""
    values, indices = top_k_on_device(logits, k)
    return values.copy_to_host(), indices.copy_to_host().astype(np.int64)


def argmax(logits) -> np.ndarray:
    """Greedy token of each row (first index among ties, as np.argmax): int64 [rows]; copies one int per row."""
    return top_k(logits, 1)[1][:, 0]
