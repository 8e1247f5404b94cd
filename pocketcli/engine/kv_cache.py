"""The paged key/value cache: one pair of [num_blocks, block_size, num_kv_heads, head_dim] arrays per layer."""
from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class KVCache:
    keys: list[np.ndarray]
    values: list[np.ndarray]
    block_size: int
    recurrent: Any = None  # RecurrentStatePool of a hybrid model (per-sequence Gated DeltaNet states), else None

    @property
    def num_blocks(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in zip(self.keys, self.values))


def lazy_zeros(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """Zeros in fresh anonymous pages, so a page joins the RSS only when a token's keys or values are written to
    it: the cache is sized for the whole context, but costs memory for what is used. (np.zeros can be served
    from reused heap memory, which calloc must clear: 4 of a 23 MiB cache were resident before any token.)"""
    count = int(np.prod(shape, dtype=np.int64))
    pages = mmap.mmap(-1, max(1, count * np.dtype(dtype).itemsize), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(pages, dtype=dtype, count=count).reshape(shape)


def make_kv_cache(num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                  head_dim: int, dtype=np.float32, zeros=lazy_zeros, value_dim: int | None = None) -> KVCache:
    """`zeros` allocates each layer: lazy_zeros, or a backend's device allocator (kernels_numba.cuda.zeros);
    value_dim: the values' width when it is not head_dim (0: a model that reads its values from the keys)."""
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    value_shape = shape[:3] + (head_dim if value_dim is None else value_dim,)
    keys = [zeros(shape, dtype=dtype) for _ in range(num_layers)]
    values = [zeros(value_shape, dtype=dtype) for _ in range(num_layers)]
    return KVCache(keys, values, block_size)
