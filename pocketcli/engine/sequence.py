"""One request being generated: its tokens, its KV blocks and its progress."""
from __future__ import annotations

import itertools
from enum import Enum, auto

from ..sampling_params import SamplingParams


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


_seq_counter = itertools.count()


class Sequence:
    def __init__(self, token_ids: list[int], params: SamplingParams, block_size: int):
        self.seq_id = next(_seq_counter)
        self.status = SequenceStatus.WAITING
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.params = params
        self.block_size = block_size
        self.block_table: list[int] = []
        self.num_cached_tokens = 0  # tokens whose K/V are already in the cache
        self.num_hashed_blocks = 0  # leading blocks registered in the prefix cache
        self.num_prefix_cached_tokens = 0  # prompt tokens the prefix cache supplied at the first schedule
        self.finish_reason: str | None = None
        self.constraint = None  # structured_output.TokenConstraint when the output must follow a grammar

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_uncached_tokens(self) -> int:
        return len(self.token_ids) - self.num_cached_tokens

    @property
    def is_prefill(self) -> bool:
        return self.num_uncached_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    @property
    def num_blocks(self) -> int:
        return (len(self.token_ids) + self.block_size - 1) // self.block_size

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
        if self.constraint is not None:
            self.constraint.accept(token_id)

    @property
    def is_constraint_complete(self) -> bool:
        """The grammar this sequence follows is complete (nothing but end-of-sequence may follow)."""
        return self.constraint is not None and self.constraint.is_finished

    def truncate(self, num_tokens: int) -> None:
        """Drop tokens from `num_tokens` on (rejected speculative drafts); their K/V no longer count as cached."""
        if self.constraint is not None and len(self.token_ids) > num_tokens:
            self.constraint.rollback(len(self.token_ids) - num_tokens)
        del self.token_ids[num_tokens:]
        self.num_cached_tokens = min(self.num_cached_tokens, num_tokens)

    def finish(self, reason: str) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason
