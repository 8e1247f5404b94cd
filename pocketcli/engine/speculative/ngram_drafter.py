"""Prompt lookup (n-gram) drafting: find the latest earlier occurrence of the last n tokens and propose what
followed it. No model; pays off when the output copies from the input (editing, summarising, code)."""
from __future__ import annotations

import numpy as np

from ..sequence import Sequence
from .drafter import Draft, Drafter


def find_ngram_continuation(token_ids: np.ndarray, max_ngram: int, min_ngram: int, num_tokens: int) -> list[int]:
    """Tokens that followed the most recent earlier match of the longest suffix n-gram (max_ngram down to
    min_ngram) of token_ids, preferring a match with num_tokens tokens after it (a run of one repeated token
    otherwise matches just before the end and yields one token); [] when no suffix n-gram occurred before."""
    length = token_ids.size
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = token_ids[length - n:]
        windows = np.lib.stride_tricks.sliding_window_view(token_ids[:length - 1], n)  # starts 0..length-1-n
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            full = hits[hits + n + num_tokens <= length]  # prefer the latest match followed by k whole tokens
            start = int(full[-1] if full.size else hits[-1]) + n
            return token_ids[start:start + num_tokens].tolist()
    return []


class NgramDrafter(Drafter):
    def __init__(self, max_ngram: int = 4, min_ngram: int = 2):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min <= max, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, seqs: list[Sequence], num_draft_tokens: list[int]) -> list[Draft]:
        drafts = []
        for seq, k in zip(seqs, num_draft_tokens):
            tokens = np.asarray(seq.token_ids, dtype=np.int64)
            drafts.append(Draft(find_ngram_continuation(tokens, self.max_ngram, self.min_ngram, k) if k else []))
        return drafts
