"""store_kv on the device: one thread per cached value."""
from __future__ import annotations

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream



@cuda.jit
def store_kv_kernel(k, v, k_cache, v_cache, slot_mapping):
    """Token t of k/v: [n, kv_heads, head_dim] goes to slot slot_mapping[t] of the paged caches (-1: skip)."""
    per_token = k.shape[1] * k.shape[2]
    for i in range(cuda.grid(1), k.shape[0] * per_token, cuda.gridsize(1)):
        token, head, d = i // per_token, (i % per_token) // k.shape[2], i % k.shape[2]
        slot = slot_mapping[token]
        if slot >= 0:
            block, offset = slot // k_cache.shape[1], slot % k_cache.shape[1]
            k_cache[block, offset, head, d] = k[token, head, d]
            v_cache[block, offset, head, d] = v[token, head, d]


def store_kv(k, v, k_cache, v_cache, slot_mapping):
    """Write token i of k/v: [n, kv_heads, head_dim] into cache slot slot_mapping[i] (-1: skip)."""
    k, v = as_device(k), as_device(v)
    if not hasattr(slot_mapping, "copy_to_host"):
        slot_mapping = np.asarray(slot_mapping, dtype=np.int64)
    slots = as_device(slot_mapping, np.int64)
    count = k.shape[0] * k.shape[1] * k.shape[2]
    if count:
        store_kv_kernel[flat_blocks(count), THREADS, current_stream()](k, v, k_cache, v_cache, slots)
