"""store_kv on the device: one thread per (token, kv head, block of 32 values), encoding to the cache's KV type."""
from __future__ import annotations

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device
from kernels_numba.cuda.kv_row import store_block
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.kv_type import VALUES_PER_BLOCK, kv_type_of


@cuda.jit
def store_kv_kernel(k, v, k_cache, v_cache, slot_mapping, kv_type):
    """Token t of k/v: [n, kv_heads, head_dim] goes to slot slot_mapping[t] of the paged caches (-1: skip)."""
    units = (k.shape[2] + VALUES_PER_BLOCK - 1) // VALUES_PER_BLOCK
    per_token = k.shape[1] * units
    for i in range(cuda.grid(1), k.shape[0] * per_token, cuda.gridsize(1)):
        token, head, unit = i // per_token, (i % per_token) // units, i % units
        slot = slot_mapping[token]
        if slot >= 0:
            block, offset = slot // k_cache.shape[1], slot % k_cache.shape[1]
            store_block(k, token, head, unit, k_cache, kv_type, block, offset)
            store_block(v, token, head, unit, v_cache, kv_type, block, offset)


def store_kv(k, v, k_cache, v_cache, slot_mapping):
    """Write token i of k/v: [n, kv_heads, head_dim] into cache slot slot_mapping[i] (-1: skip)."""
    k, v = as_device(k), as_device(v)
    if not hasattr(slot_mapping, "copy_to_host"):
        slot_mapping = np.asarray(slot_mapping, dtype=np.int64)
    slots = as_device(slot_mapping, np.int64)
    count = k.shape[0] * k.shape[1] * -(-k.shape[2] // VALUES_PER_BLOCK)
    if count:
        store_kv_kernel[flat_blocks(count), THREADS, current_stream()](k, v, k_cache, v_cache, slots,
                                                                      kv_type_of(k_cache))
