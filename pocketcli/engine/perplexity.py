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


def log_softmax_rows(logits: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, log softmax of rows first.. in float64), ROWS_AT_ONCE rows at a time."""
    for start in range(0, len(logits), ROWS_AT_ONCE):
        rows = logits[start:start + ROWS_AT_ONCE].astype(np.float64)
        peak = rows.max(axis=1, keepdims=True)
        yield start, rows - (np.log(np.exp(rows - peak).sum(axis=1, keepdims=True)) + peak)


def token_nll(logits: np.ndarray, next_ids: np.ndarray) -> np.ndarray:
    """-log softmax(logits[i])[next_ids[i]] for each row, in float64."""
    nll = np.empty(len(next_ids), dtype=np.float64)
    for start, log_probs in log_softmax_rows(logits):
        stop = start + len(log_probs)
        nll[start:stop] = -log_probs[np.arange(len(log_probs)), next_ids[start:stop]]
    return nll


def window_logits(engine, window: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(logits, next token ids) of the second half of one window: tokens ctx/2+1 .. ctx-1, each from the logits of
    the one before."""
    first = len(window) // 2
    logits = engine.score(window, first_position=first)  # rows for positions first .. ctx-1
    return logits[:-1], np.asarray(window[first + 1:], dtype=np.int64)


def window_nll(engine, window: list[int]) -> np.ndarray:
    return token_nll(*window_logits(engine, window))


def stream_perplexity(engine, windows: list[list[int]]) -> Iterator[PerplexityEstimate]:
    """The running estimate after each window."""
    estimate = PerplexityEstimate()
    for window in windows:
        estimate.add(window_nll(engine, window))
        yield estimate


@dataclass
class Divergence:
    """How far an engine's next-token distributions are from a base engine's on the same windows (llama-perplexity
    --kl-divergence): mean KL(base || this), how often the top tokens agree, and ln(PPL / base PPL) with the
    standard error of the paired per-token NLL gaps (far tighter than the two PPLs' own ± when they differ
    little)."""
    num_scored: int = 0
    kl_sum: float = 0.0
    same_top: int = 0
    gap_sum: float = 0.0
    gap_square_sum: float = 0.0

    def add(self, base_logits: np.ndarray, logits: np.ndarray, next_ids: np.ndarray) -> None:
        for (start, base), (_, this) in zip(log_softmax_rows(base_logits), log_softmax_rows(logits)):
            rows = np.arange(len(base))
            ids = next_ids[start:start + len(base)]
            gaps = base[rows, ids] - this[rows, ids]  # this NLL - base NLL
            self.num_scored += len(base)
            self.kl_sum += float((np.exp(base) * (base - this)).sum())
            self.same_top += int((base.argmax(axis=1) == this.argmax(axis=1)).sum())
            self.gap_sum += float(gaps.sum())
            self.gap_square_sum += float((gaps * gaps).sum())

    @property
    def mean_kl(self) -> float:
        return self.kl_sum / self.num_scored if self.num_scored else math.nan

    @property
    def top_agreement(self) -> float:
        return self.same_top / self.num_scored if self.num_scored else math.nan

    @property
    def log_ratio(self) -> float:
        return self.gap_sum / self.num_scored if self.num_scored else math.nan

    @property
    def log_ratio_uncertainty(self) -> float:
        if self.num_scored < 2:
            return math.nan
        mean = self.log_ratio
        return math.sqrt(max(self.gap_square_sum / self.num_scored - mean * mean, 0.0) / (self.num_scored - 1))


def stream_divergence(engine, base_engine, windows: list[list[int]]) -> Iterator[tuple[PerplexityEstimate,
                                                                                       Divergence]]:
    """The running estimate of `engine` and its divergence from `base_engine`, after each window."""
    estimate, divergence = PerplexityEstimate(), Divergence()
    for window in windows:
        base_logits, _ = window_logits(base_engine, window)
        logits, next_ids = window_logits(engine, window)
        estimate.add(token_nll(logits, next_ids))
        divergence.add(base_logits, logits, next_ids)
        yield estimate, divergence
