"""Decides which sequences run in the next step and how many of their tokens (chunked prefill)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int  # tokens whose K/V are computed this step
    num_draft_tokens: int = 0  # speculative decoding: the last tokens are drafts, each also needs logits

    @property
    def samples_token(self) -> bool:
        """True when this step computes the sequence's last token, so a next token is sampled."""
        return self.seq.num_cached_tokens + self.num_new_tokens == len(self.seq)


@dataclass
class ScheduledBatch:
    items: list[ScheduledSeq] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 1
    max_num_batched_tokens: int = 512
    max_model_len: int = 4096

    def __post_init__(self):
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1 or self.max_model_len < 2:
            raise ValueError(f"invalid scheduler limits: {self}")


class Scheduler:
    def __init__(self, config: SchedulerConfig, block_manager: BlockManager, eos_token_ids: set[int]):
        self.config = config
        self.block_manager = block_manager
        self.eos_token_ids = set(eos_token_ids)
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.config.max_num_batched_tokens
        budget = self._schedule_running(batch, budget)
        self._schedule_waiting(batch, budget)
        return batch

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        for seq in list(self.running):
            if budget == 0 or seq not in self.running:
                break
            num_new = min(seq.num_uncached_tokens, budget)
            while not self.block_manager.can_allocate(seq, seq.num_cached_tokens + num_new):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    return budget
            self.block_manager.allocate(seq, seq.num_cached_tokens + num_new)
            batch.items.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        return budget

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            cached_block_ids = self.block_manager.cached_prefix(seq)
            num_cached_tokens = len(cached_block_ids) * self.block_manager.block_size
            num_new = min(len(seq) - num_cached_tokens, budget)
            if not self.block_manager.can_allocate(seq, num_cached_tokens + num_new, cached_block_ids):
                break
            self.block_manager.allocate(seq, num_cached_tokens + num_new, cached_block_ids)
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.items.append(ScheduledSeq(seq, num_new))
            budget -= num_new

    def _preempt(self, seq: Sequence) -> None:
        """The newest running sequence gives its blocks back and is recomputed later."""
        self.running.remove(seq)
        self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

    def postprocess(self, batch: ScheduledBatch, sampled_token_ids: list[int]) -> list[Sequence]:
        """Record computed tokens, append sampled ones (one per sampling item, in order); return finished."""
        finished = []
        sampled = iter(sampled_token_ids)
        for item in batch.items:
            samples = item.samples_token  # read before recording: it depends on the cached-token count
            self._record_computed(item)
            if not samples:
                continue
            seq = item.seq
            seq.append_token(next(sampled))
            reason = self._finish_reason(seq)
            if reason:
                self.finish(seq, reason)
                finished.append(seq)
        return finished

    def postprocess_tokens(self, batch: ScheduledBatch, token_ids_per_item: list[list[int]]) -> list[list[int]]:
        """Like `postprocess`, but each sampling item may append several tokens (speculative decoding); a
        sequence stops at its first finishing token. Returns the tokens really appended, per sampling item."""
        appended = []
        new_tokens = iter(token_ids_per_item)
        for item in batch.items:
            samples = item.samples_token
            self._record_computed(item)
            if samples:
                appended.append(self._append_until_finished(item.seq, next(new_tokens)))
        return appended

    def _record_computed(self, item) -> None:
        """The item's new tokens now have KV in the cache; full blocks become shareable prefix blocks."""
        item.seq.num_cached_tokens += item.num_new_tokens
        self.block_manager.cache_full_blocks(item.seq)

    def _append_until_finished(self, seq: Sequence, token_ids: list[int]) -> list[int]:
        for count, token_id in enumerate(token_ids, 1):
            seq.append_token(token_id)
            reason = self._finish_reason(seq)
            if reason:
                self.finish(seq, reason)
                return token_ids[:count]
        return list(token_ids)

    def _finish_reason(self, seq: Sequence) -> str | None:
        if not seq.params.ignore_eos and seq.token_ids[-1] in self.eos_token_ids:
            return "stop"
        if seq.is_constraint_complete:  # the grammar is complete: only end-of-sequence could follow
            return "stop"
        if seq.num_completion_tokens >= seq.params.max_tokens:
            return "length"
        if len(seq) >= self.config.max_model_len:
            return "length"
        return None

    def finish(self, seq: Sequence, reason: str) -> None:
        if seq.is_finished:
            return
        seq.finish(reason)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.deallocate(seq)
