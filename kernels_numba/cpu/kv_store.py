"""Writing new keys and values into the paged KV cache, encoded to its KV type as they are stored."""
import numpy as np
from numba import njit

from kernels_numba.cpu.kv_row import store_kv_row
from kernels_numba.kv_type import kv_type_of, kv_type_of_code


@njit(cache=True)
def store_kv_into(k, v, k_cache, v_cache, slot_mapping, kv_type):
    """Element loops rather than k_cache[block, offset] = k[i]: numba compiles an array-to-slice assignment with
    an f-string shape-mismatch error path (~3.5 s per shape arity on a first run)."""
    block_size = k_cache.shape[1]
    for i in range(slot_mapping.size):
        slot = slot_mapping[i]
        if slot < 0:  # padding token: nothing to store
            continue
        block, offset = slot // block_size, slot % block_size
        for head in range(k.shape[1]):
            store_kv_row(k_cache, kv_type, block, offset, head, k[i, head])
            store_kv_row(v_cache, kv_type, block, offset, head, v[i, head])


def cache_row_shape(cache: np.ndarray, width: int) -> tuple[int, ...]:
    """The [kv_heads, row] a cache of `cache`'s KV type holds for rows of `width` values."""
    return (cache.shape[2], kv_type_of_code(kv_type_of(cache)).row_length(width))


def store_kv(k: np.ndarray, v: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
             slot_mapping: np.ndarray) -> None:
    """Write token i of k/v: [n, kv_heads, head_dim] into slot slot_mapping[i] = block * block_size + offset."""
    slot_mapping = np.ascontiguousarray(slot_mapping, dtype=np.int64).reshape(-1)
    if not (k.shape == v.shape and k.shape[0] == slot_mapping.size
            and cache_row_shape(k_cache, k.shape[2]) == k_cache.shape[2:]):
        raise ValueError(f"store_kv: k {k.shape}, v {v.shape}, {slot_mapping.size} slots, cache {k_cache.shape}")
    if slot_mapping.size and slot_mapping.max() >= k_cache.shape[0] * k_cache.shape[1]:
        raise IndexError("store_kv: slot beyond the end of the cache")
    store_kv_into(np.ascontiguousarray(k, dtype=np.float32), np.ascontiguousarray(v, dtype=np.float32),
                  k_cache, v_cache, slot_mapping, kv_type_of(k_cache))
