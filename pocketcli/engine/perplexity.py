"""Perplexity the way llama.cpp's llama-perplexity measures it, so lossy choices (weight types, KV types, speculative
paths) compare with llama.cpp users' figures.

The text's tokens are cut into non-overlapping windows of ctx tokens; each window starts a fresh sequence whose
first token is replaced by BOS, and only the second half is scored (every scored token sees at least ctx/2 tokens
of context): the negative log-likelihood of token j+1 given tokens ..j, for j from ctx/2 to ctx-2. The estimate is
exp(mean NLL), its ± the standard error of the mean NLL times the estimate (llama.cpp's "PPL = x +/- y").
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

ROWS_AT_ONCE = 32  # logits rows turned into log-probabilities at a time (a row is vocab_size float64s)


@dataclass
class PerplexityEstimate:
    num_windows: int = 0
    num_scored: int = 0
    nll_sum: float = 0.0
    nll_square_sum: float = 0.0

    def add(self, nll: np.ndarray) -> None:
        self.num_windows += 1
        self.num_scored += nll.size
        self.nll_sum += float(nll.sum())
        self.nll_square_sum += float((nll * nll).sum())

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll_sum / self.num_scored) if self.num_scored else math.nan

    @property
    def uncertainty(self) -> float:
        """llama.cpp's ±: sqrt(var(nll) / (n - 1)) * perplexity."""
        if self.num_scored < 2:
            return math.nan
        mean = self.nll_sum / self.num_scored
        variance = self.nll_square_sum / self.num_scored - mean * mean
        return math.sqrt(max(variance, 0.0) / (self.num_scored - 1)) * self.perplexity


def make_windows(token_ids: list[int], ctx: int, bos_id: int | None, max_windows: int = 0) -> list[list[int]]:
    """Non-overlapping windows of ctx tokens (a shorter tail is dropped), each starting with BOS when the model has
    one; max_windows > 0 keeps the first that many."""
    if ctx < 4:
        raise ValueError(f"perplexity needs --ctx-size >= 4, got {ctx}")
    count = len(token_ids) // ctx
    if max_windows > 0:
        count = min(count, max_windows)
    if count == 0:
        raise ValueError(f"the text has {len(token_ids)} tokens: fewer than one window of --ctx-size {ctx}")
    windows = [list(token_ids[w * ctx:(w + 1) * ctx]) for w in range(count)]
    if bos_id is not None:
        for window in windows:
            window[0] = bos_id
    return windows


def token_nll(logits: np.ndarray, next_ids: np.ndarray) -> np.ndarray:
    """-log softmax(logits[i])[next_ids[i]] for each row, in float64."""
    nll = np.empty(len(next_ids), dtype=np.float64)
    for start in range(0, len(next_ids), ROWS_AT_ONCE):
        rows = logits[start:start + ROWS_AT_ONCE].astype(np.float64)
        peak = rows.max(axis=1, keepdims=True)
        log_total = np.log(np.exp(rows - peak).sum(axis=1)) + peak[:, 0]
        chosen = rows[np.arange(len(rows)), next_ids[start:start + ROWS_AT_ONCE]]
        nll[start:start + len(rows)] = log_total - chosen
    return nll


def window_nll(engine, window: list[int]) -> np.ndarray:
    """NLL of the second half of one window: tokens ctx/2+1 .. ctx-1, each from the logits of the one before."""
    first = len(window) // 2
    logits = engine.score(window, first_position=first)  # rows for positions first .. ctx-1
    return token_nll(logits[:-1], np.asarray(window[first + 1:], dtype=np.int64))


def stream_perplexity(engine, windows: list[list[int]]) -> Iterator[PerplexityEstimate]:
    """The running estimate after each window."""
    estimate = PerplexityEstimate()
    for window in windows:
        estimate.add(window_nll(engine, window))
        yield estimate
