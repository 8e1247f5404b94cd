"""The paged key/value cache: one pair of [num_blocks, block_size, num_kv_heads, head_dim] arrays per layer."""
from __future__ import annotations

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


def make_kv_cache(num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                  head_dim: int, dtype=np.float32, zeros=np.zeros) -> KVCache:
    """`zeros` allocates each layer: np.zeros, or a backend's device allocator (kernels_numba.cuda.zeros)."""
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    keys = [zeros(shape, dtype=dtype) for _ in range(num_layers)]
    values = [zeros(shape, dtype=dtype) for _ in range(num_layers)]
    return KVCache(keys, values, block_size)
