"""The paged key/value cache: one pair of [num_blocks, block_size, num_kv_heads, row] arrays per layer, row = head_dim
float32 values for --kv-type f32, else the bytes of one head's row of its type (kernels_numba/kv_type.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels_numba.host_arrays import zeros as lazy_zeros  # zeros in fresh anonymous pages: RSS as they are written
from kernels_numba.kv_type import check_row_width, kv_type_named, make_kv_layer


@dataclass
class KVCache:
    keys: list[np.ndarray]
    values: list[np.ndarray]
    block_size: int
    recurrent: Any = None  # RecurrentStatePool of a hybrid model (per-sequence Gated DeltaNet states), else None
    kv_type: str = "f32"

    @property
    def num_blocks(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in zip(self.keys, self.values))

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token's keys and values take in every layer."""
        return self.nbytes // (self.num_blocks * self.block_size) if self.num_blocks else 0


def make_kv_cache(num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                  head_dim: int, zeros=lazy_zeros, value_dim: int | None = None,
                  kv_type: str = "f32") -> KVCache:
    """`zeros` allocates each layer: the backend's ops.zeros (lazy_zeros, the host's, by default);
    value_dim: the values' width when it is not head_dim (0: a model that reads its values from the keys)."""
    kind = kv_type_named(kv_type)
    value_dim = head_dim if value_dim is None else value_dim
    for width in (head_dim, value_dim):
        check_row_width(kind, width)
    keys = [make_kv_layer(num_blocks, block_size, num_kv_heads, head_dim, kind, zeros) for _ in range(num_layers)]
    values = [make_kv_layer(num_blocks, block_size, num_kv_heads, value_dim, kind, zeros) for _ in range(num_layers)]
    return KVCache(keys, values, block_size, kv_type=kind.name)
