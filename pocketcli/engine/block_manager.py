"""Paged KV cache bookkeeping: which physical blocks each sequence owns, and automatic prefix caching.

Each FULL block of computed tokens gets a hash chained with the previous block's hash, so equal hashes mean an
equal whole prefix. A hash -> block id map lets a new sequence reuse those blocks (ref counts keep a shared block
alive); freed blocks keep their hash and stay findable until a fresh allocation evicts them, least recently
freed first.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from .sequence import Sequence

NO_HASH = -1


def hash_block(prev_hash: int, token_ids: list[int]) -> int:
    """Chained hash: equal hashes mean equal tokens in this block AND in every block before it."""
    return hash((prev_hash, *token_ids))


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int = NO_HASH
    token_ids: tuple[int, ...] = field(default_factory=tuple)  # checked on lookup: a hash collision never aliases

    def reset(self) -> None:
        self.ref_count, self.hash, self.token_ids = 0, NO_HASH, ()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block_id: dict[int, int] = {}
        # free blocks in eviction order: the front is reused first (uncached blocks, then least recently freed)
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.num_prefix_query_tokens = 0  # prompt tokens looked up in the prefix cache
        self.num_prefix_hit_tokens = 0  # ... of which were found there

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.num_prefix_hit_tokens / self.num_prefix_query_tokens if self.num_prefix_query_tokens else 0.0

    # ---- asking

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids holding the longest cached prefix of a sequence that owns no blocks yet. Stops before the
        block holding the last token, which is always recomputed so there are logits to sample from."""
        if not self.enable_prefix_caching or seq.block_table:
            return []
        found, prev_hash = [], NO_HASH
        for index in range((len(seq) - 1) // self.block_size):
            tokens = tuple(seq.token_ids[index * self.block_size:(index + 1) * self.block_size])
            prev_hash = hash_block(prev_hash, tokens)
            block_id = self.hash_to_block_id.get(prev_hash)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            found.append(block_id)
        return found

    def blocks_needed(self, seq: Sequence, num_tokens: int, cached_block_ids: list[int] = ()) -> int:
        """Free blocks taken to hold `num_tokens` tokens: fresh ones plus cached hits that sit on the free list."""
        needed = (num_tokens + self.block_size - 1) // self.block_size
        fresh = max(0, needed - len(seq.block_table) - len(cached_block_ids))
        return fresh + sum(1 for b in cached_block_ids if self.blocks[b].ref_count == 0)

    def can_allocate(self, seq: Sequence, num_tokens: int, cached_block_ids: list[int] = ()) -> bool:
        return self.blocks_needed(seq, num_tokens, cached_block_ids) <= self.num_free_blocks

    # ---- acting

    def allocate(self, seq: Sequence, num_tokens: int, cached_block_ids: list[int] = ()) -> None:
        """Grow the block table to hold `num_tokens`; a sequence with no blocks first takes the cached prefix
        (from `cached_prefix`) and starts with those tokens already computed."""
        if not seq.block_table:
            self._attach_cached(seq, cached_block_ids)
        needed = (num_tokens + self.block_size - 1) // self.block_size
        for _ in range(needed - len(seq.block_table)):
            seq.block_table.append(self._take_fresh_block())

    def _attach_cached(self, seq: Sequence, cached_block_ids: list[int]) -> None:
        for block_id in cached_block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_block_ids[block_id]
            block.ref_count += 1
            seq.block_table.append(block_id)
        seq.num_cached_tokens = seq.num_hashed_blocks = len(cached_block_ids)
        seq.num_cached_tokens *= self.block_size
        if seq.num_completion_tokens == 0:  # count each prompt once, not again after a preemption
            seq.num_prefix_cached_tokens = seq.num_cached_tokens
            self.num_prefix_query_tokens += len(seq)
            self.num_prefix_hit_tokens += seq.num_cached_tokens

    def _take_fresh_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash != NO_HASH and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]  # evict: its contents are about to be overwritten
        block.reset()
        block.ref_count = 1
        return block_id

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register every block that has become full of computed tokens since the last call."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_cached_tokens // self.block_size, len(seq.block_table))
        for index in range(seq.num_hashed_blocks, num_full):
            prev_hash = self.blocks[seq.block_table[index - 1]].hash if index else NO_HASH
            block = self.blocks[seq.block_table[index]]
            block.token_ids = tuple(seq.token_ids[index * self.block_size:(index + 1) * self.block_size])
            block.hash = hash_block(prev_hash, block.token_ids)
            self.hash_to_block_id.setdefault(block.hash, block.block_id)
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, num_full)

    def free_tail(self, seq: Sequence) -> int:
        """Give back blocks past those holding the sequence's tokens (speculative rollback); returns how many.
        Tail blocks held only rejected drafts, which were never cached, so no prefix-cache hash points at them."""
        num_freed = 0
        while len(seq.block_table) > seq.num_blocks:
            block = self.blocks[seq.block_table.pop()]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free(block)
            num_freed += 1
        seq.num_hashed_blocks = min(seq.num_hashed_blocks, len(seq.block_table))
        return num_freed

    def deallocate(self, seq: Sequence) -> None:
        """Give the sequence's blocks back at once; cached ones stay findable until evicted."""
        for block_id in reversed(seq.block_table):  # tail first: the shared head of a prefix is evicted last
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free(block)
        seq.block_table.clear()
        seq.num_cached_tokens = 0
        seq.num_hashed_blocks = 0

    def clear_prefix_cache(self) -> None:
        """Forget the cached prefixes of every free block (blocks in use keep theirs) and the hit counters."""
        for block_id in self.free_block_ids:
            block = self.blocks[block_id]
            if block.hash != NO_HASH and self.hash_to_block_id.get(block.hash) == block_id:
                del self.hash_to_block_id[block.hash]
            block.reset()
        self.num_prefix_query_tokens = self.num_prefix_hit_tokens = 0

    def _free(self, block: Block) -> None:
        self.free_block_ids[block.block_id] = None
        is_findable = block.hash != NO_HASH and self.hash_to_block_id.get(block.hash) == block.block_id
        if not is_findable:  # nothing to keep: reuse it before any cached block
            block.reset()
            self.free_block_ids.move_to_end(block.block_id, last=False)
