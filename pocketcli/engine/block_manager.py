"""Paged KV cache bookkeeping: which physical blocks each sequence owns."""
from __future__ import annotations

from collections import deque

from .sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_block_ids: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Extra blocks the sequence needs to hold `num_tokens` tokens in the cache."""
        needed = (num_tokens + self.block_size - 1) // self.block_size
        return max(0, needed - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(seq, num_tokens) <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        for _ in range(self.blocks_needed(seq, num_tokens)):
            seq.block_table.append(self.free_block_ids.popleft())

    def deallocate(self, seq: Sequence) -> None:
        self.free_block_ids.extend(reversed(seq.block_table))
        seq.block_table.clear()
        seq.num_cached_tokens = 0
