"""Turns logits into next tokens: small composable filters, applied in llama.cpp's default order.

Order: logit bias -> repetition penalty -> presence/frequency penalties -> top-k -> top-p -> min-p -> temperature -> draw. temperature == 0 is argmax.

The Sampler runs these filters on the fewest tokens that can survive them, in float64 buffers it reuses: a fresh
vocabulary-sized temporary (1-2 MiB for 262k tokens) costs more in page faults than the arithmetic done on it.
With no top-k/top-p/min-p cut (the OpenAI defaults) rows are drawn by kernels_numba.cpu.softmax_draw instead:
float32 weights that are never stored whole, a batch's rows one per pool thread.
"""
from __future__ import annotations

import numpy as np

from kernels_numba import DRAW_BLOCK, NO_TOKEN, softmax_draw_rows

from ..sampling_params import SamplingParams


class VocabScratch:
    """Named buffers, grown on demand and reused by every draw (only the engine thread samples)."""

    def __init__(self):
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype=np.float64) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size or buffer.dtype != dtype:
            buffer = self._buffers[name] = np.empty(size, dtype=dtype)
        return buffer[:size]

    def copy_of(self, name: str, values: np.ndarray, dtype=None) -> np.ndarray:
        """values copied into buffer `name` (as dtype), for filters that work in place."""
        out = self.get(name, values.size, dtype or values.dtype)
        np.copyto(out, values)
        return out


# ---- penalties (the first stage, on float64 logits): each `_penalize_*` works in place

def apply_repeat_penalty(logits: np.ndarray, recent_token_ids: np.ndarray, penalty: float) -> np.ndarray:
    return _penalize_repeats(logits.copy(), recent_token_ids, penalty)


def _penalize_repeats(logits: np.ndarray, recent_token_ids: np.ndarray, penalty: float) -> np.ndarray:
    if penalty == 1.0 or recent_token_ids.size == 0:
        return logits
    ids = np.unique(recent_token_ids)
    picked = logits[ids]
    logits[ids] = np.where(picked > 0, picked / penalty, picked * penalty)
    return logits


def apply_presence_frequency_penalty(logits: np.ndarray, generated_token_ids: np.ndarray, presence: float,
                                     frequency: float) -> np.ndarray:
    """OpenAI's penalties: over generated tokens only, presence once per token, frequency per occurrence."""
    return _penalize_presence_frequency(logits.copy(), generated_token_ids, presence, frequency)


def _penalize_presence_frequency(logits: np.ndarray, generated_token_ids: np.ndarray, presence: float,
                                 frequency: float) -> np.ndarray:
    if (presence == 0.0 and frequency == 0.0) or generated_token_ids.size == 0:
        return logits
    ids, counts = np.unique(generated_token_ids, return_counts=True)
    logits[ids] -= presence + frequency * counts
    return logits


def apply_logit_bias(logits: np.ndarray, logit_bias: dict[int, float]) -> np.ndarray:
    return _add_logit_bias(logits.copy(), logit_bias)


def _add_logit_bias(logits: np.ndarray, logit_bias: dict[int, float]) -> np.ndarray:
    if not logit_bias:
        return logits
    ids = np.fromiter(logit_bias.keys(), dtype=np.int64, count=len(logit_bias))
    logits[ids] += np.fromiter(logit_bias.values(), dtype=np.float64, count=len(logit_bias))
    return logits


def apply_allowed_mask(logits: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """Tokens a grammar forbids (allowed False) get -inf; works on one row or a batch [B, vocab] of rows.
    None allows every token."""
    if allowed is None:
        return logits
    return np.where(allowed[..., :logits.shape[-1]], logits, -np.inf)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - np.max(logits)
    return shifted - np.log(np.exp(shifted).sum())


# ---- truncation and temperature

def apply_top_k(logits: np.ndarray, top_k: int) -> np.ndarray:
    if top_k <= 0 or top_k >= logits.size:
        return logits
    kth = np.partition(logits, -top_k)[-top_k]
    return np.where(logits >= kth, logits, -np.inf)


def softmax(logits: np.ndarray) -> np.ndarray:
    return _softmax_in_place(np.array(logits, dtype=np.float64))


def _softmax_in_place(logits: np.ndarray) -> np.ndarray:
    """float64 logits -> probabilities, in the same buffer."""
    logits -= np.max(logits)
    np.exp(logits, out=logits)
    logits /= logits.sum()
    return logits


def apply_top_p(logits: np.ndarray, top_p: float) -> np.ndarray:
    if top_p >= 1.0:
        return logits
    order = np.argsort(-logits, kind="stable")
    probs = softmax(logits[order])
    cumulative = np.cumsum(probs)
    # keep the smallest prefix whose mass reaches top_p (always at least one token)
    num_keep = int(np.searchsorted(cumulative, top_p) + 1)
    out = np.full_like(logits, -np.inf)
    keep = order[:num_keep]
    out[keep] = logits[keep]
    return out


def apply_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    return _cut_below_min_p(logits.copy(), min_p)


def _cut_below_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    if min_p <= 0.0:
        return logits
    # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
    threshold = np.max(logits) + np.log(min_p)
    logits[~(logits >= threshold)] = -np.inf
    return logits


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    return logits / temperature


NUCLEUS_GUESSES = (1024, 8192, 65536)  # top-p tries this many best tokens in turn; the whole vocabulary is sorted last


BLOCKS_PER_K = 8  # kth_largest's blocks: 8k of them, so that few values reach the floor their maxima give
MIN_BLOCK_VALUES = 4


def kth_largest(values: np.ndarray, k: int, scratch: VocabScratch) -> float:
    """The k-th largest value. Of 8k blocks, the k-th largest block maximum is a floor: k blocks reach it, so the
    k-th largest value does too, and only the values at or above it (and the tail past the last block) are
    partitioned. A top-40 of 262k float64 logits: 4.9 -> 0.23 ms (AMD EPYC), against an ~11 ms decode step of
    Gemma 3 270M."""
    block_values = values.size // (BLOCKS_PER_K * k)
    if block_values < MIN_BLOCK_VALUES:
        return _kth_largest_of_all(values, k, scratch)
    num_blocks = values.size // block_values
    blocked = values[:num_blocks * block_values]
    maxima = blocked.reshape(num_blocks, block_values).max(axis=1)
    floor = maxima[np.argpartition(maxima, num_blocks - k)[num_blocks - k]]
    candidates = np.concatenate((blocked[blocked >= floor], values[num_blocks * block_values:]))
    return float(np.partition(candidates, candidates.size - k)[candidates.size - k])


def _kth_largest_of_all(values: np.ndarray, k: int, scratch: VocabScratch) -> float:
    """Partitioned in a scratch copy (np.partition would allocate one per call)."""
    work = scratch.copy_of(f"partition-{values.dtype}", values)
    work.partition(values.size - k)
    return work[values.size - k]


def top_k_candidates(logits: np.ndarray, top_k: int, scratch: VocabScratch) -> np.ndarray | None:
    """Ids of the tokens top-k keeps (ties with the k-th value kept, as apply_top_k does), ascending; None when it
    keeps every token."""
    if top_k <= 0 or top_k >= logits.size:
        return None
    return np.flatnonzero(logits >= kth_largest(logits, top_k, scratch))


def nucleus_candidates(logits: np.ndarray, top_p: float, scratch: VocabScratch) -> tuple[np.ndarray, float] | None:
    """A subset surely holding the top-p nucleus, found without sorting the whole vocabulary, as (ids, the
    top-p to apply within the subset); None when no guess under half the vocabulary reaches top_p."""
    if top_p >= 1.0 or logits.size <= 2 * NUCLEUS_GUESSES[0]:
        return None
    weights = scratch.get("weights", logits.size)
    np.subtract(logits, float(np.max(logits)), out=weights, dtype=np.float64)
    np.exp(weights, out=weights)
    total_mass = weights.sum()
    for guess in NUCLEUS_GUESSES:
        if 2 * guess >= logits.size:
            break
        ids = np.flatnonzero(logits >= kth_largest(logits, guess, scratch))
        subset_mass = weights[ids].sum()
        if subset_mass >= top_p * total_mass:
            return ids, min(1.0, top_p * total_mass / subset_mass)  # same cut: cumulative / total >= top_p
    return None


def penalized_logits(logits: np.ndarray, params: SamplingParams, history_token_ids: list[int],
                     num_prompt_tokens: int | None, out: np.ndarray | None = None) -> np.ndarray:
    """The first stage (logit bias, repetition, presence/frequency penalties), as float64, written into `out` when
    given. `history_token_ids`: prompt + generated tokens; the first `num_prompt_tokens` are the prompt (None: all
    are generated)."""
    if out is None:
        out = logits.astype(np.float64)
    else:
        np.copyto(out, logits)
    _add_logit_bias(out, params.logit_bias)
    _penalize_repeats(out, recent_token_ids(history_token_ids, params), params.repeat_penalty)
    generated = np.asarray(history_token_ids[num_prompt_tokens or 0:], dtype=np.int64)
    return _penalize_presence_frequency(out, generated, params.presence_penalty, params.frequency_penalty)


def candidate_weights(logits: np.ndarray, params: SamplingParams, scratch: VocabScratch | None = None
                      ) -> tuple[np.ndarray | None, np.ndarray]:
    """(token ids, ascending, or None for the whole vocabulary in order; float64 probabilities, 0 where min-p or
    top-p cut a token) after top-k, top-p, min-p and temperature on (penalized) logits of any float type: the same
    distribution as the filters on the whole vocabulary, computed on the tokens that can survive them. With a
    scratch, the whole-vocabulary probabilities live in its buffer until the next call."""
    scratch = VocabScratch() if scratch is None else scratch
    ids = top_k_candidates(logits, params.top_k, scratch)
    values = logits if ids is None else logits[ids]
    top_p, nucleus = params.top_p, nucleus_candidates(values, params.top_p, scratch)
    if nucleus is not None:
        subset, top_p = nucleus
        ids, values = (subset if ids is None else ids[subset]), values[subset]
    if values is logits:  # the caller's array: the filters below work on a float64 copy
        values = scratch.copy_of("probs", logits, np.float64)
    values = _cut_below_min_p(apply_top_p(values.astype(np.float64, copy=False), top_p), params.min_p)
    np.divide(values, params.temperature, out=values)
    return ids, _softmax_in_place(values)


def candidate_probs(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, probabilities) of the tokens candidate_weights leaves a chance."""
    ids, probs = candidate_weights(logits, params)
    keep = probs > 0
    return (np.flatnonzero(keep) if ids is None else ids[keep]), probs[keep]


def vocab_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """candidate_weights spread over the whole vocabulary: [vocab] float64."""
    ids, probs = candidate_weights(logits, params)
    if ids is None:
        return probs
    out = np.zeros(logits.size, dtype=np.float64)
    out[ids] = probs
    return out


def recent_token_ids(history_token_ids: list[int], params: SamplingParams) -> np.ndarray:
    """The window the repetition penalty looks at."""
    if params.repeat_penalty == 1.0 or params.repeat_last_n == 0:
        return np.empty(0, dtype=np.int64)
    recent = history_token_ids if params.repeat_last_n < 0 else history_token_ids[-params.repeat_last_n:]
    return np.asarray(recent, dtype=np.int64)


def keeps_whole_vocabulary(params: SamplingParams, vocab_size: int) -> bool:
    """No top-k, top-p or min-p cut: every token keeps a chance (the OpenAI defaults, temperature > 0)."""
    return (params.top_k <= 0 or params.top_k >= vocab_size) and params.top_p >= 1.0 and params.min_p <= 0.0


# a draw sums blocks of DRAW_BLOCK weights (vectorised) rather than run one sum over them all, as the kernel does
NO_TOKEN_MESSAGE = "no token can be sampled: the probabilities are NaN or all zero"


def draw_whole_vocabulary(logits: np.ndarray, temperature: float, u: float) -> int:
    """inverse_cdf_index of candidate_weights' probabilities for a row that keeps_whole_vocabulary, from
    exp((logits - max) / temperature) unnormalised (u scales their total instead): softmax_draw_rows' kernel
    on one row."""
    return int(_checked_draws(softmax_draw_rows(logits.reshape(1, -1), np.zeros(1, dtype=np.int64),
                                                np.array([1.0 / temperature]), np.array([u])))[0])


def _checked_draws(tokens: np.ndarray) -> np.ndarray:
    if (tokens == NO_TOKEN).any():  # NaN logits, or a grammar that leaves no token: never a silent pick
        raise ValueError(NO_TOKEN_MESSAGE)
    return tokens


def inverse_cdf_index(weights: np.ndarray, u: float) -> int:
    """The first index whose running sum of float64 weights exceeds u * their total, u in [0, 1): the inverse-CDF
    draw of Generator.choice(p=weights) for the same u (equal up to rounding, and a zero weight is never picked),
    found from block sums and one block's running sum instead of a running sum over the whole vocabulary."""
    return _inverse_cdf(_block_sums(weights), lambda first: weights[first:first + DRAW_BLOCK], u)


def _block_sums(weights: np.ndarray) -> np.ndarray:
    """The sum of each DRAW_BLOCK weights (the last block may be shorter)."""
    num_full = weights.size // DRAW_BLOCK
    block_sums = weights[:num_full * DRAW_BLOCK].reshape(num_full, DRAW_BLOCK).sum(axis=1)
    if num_full * DRAW_BLOCK < weights.size:
        block_sums = np.append(block_sums, weights[num_full * DRAW_BLOCK:].sum())
    return block_sums


def _inverse_cdf(block_sums: np.ndarray, block_weights, u: float) -> int:
    """inverse_cdf_index from the block sums and `block_weights(first index)`: one block's weights."""
    block_ends = np.cumsum(block_sums)
    if not block_ends[-1] > 0:  # NaN logits, or a grammar that leaves no token: never a silent pick
        raise ValueError(NO_TOKEN_MESSAGE)
    target = u * block_ends[-1]
    block = int(block_ends.searchsorted(target, side="right"))
    if block == block_sums.size:  # u * total rounded up to the total
        block = int(np.flatnonzero(block_sums)[-1])
    start = block * DRAW_BLOCK
    in_block = block_weights(start)
    mass_before = block_ends[block - 1] if block else 0.0
    index = int(np.cumsum(in_block).searchsorted(target - mass_before, side="right"))
    if index == in_block.size:  # the block's own running sum rounded below its pairwise sum
        index = int(np.flatnonzero(in_block)[-1])
    return start + index


class Sampler:
    """Keeps one random generator per sequence so a seed reproduces the same text."""

    def __init__(self):
        self._rngs: dict[int, np.random.Generator] = {}
        self._scratch = VocabScratch()

    def sample(self, logits: np.ndarray, params: SamplingParams, seq_id: int,
               history_token_ids: list[int], num_prompt_tokens: int | None = None) -> int:
        """`history_token_ids`: prompt + generated tokens; the first `num_prompt_tokens` of them are the prompt
        (None: all are generated), which the presence/frequency penalties skip."""
        if params.has_penalties:
            logits = penalized_logits(logits, params, history_token_ids, num_prompt_tokens,
                                      out=self._scratch.get("penalized", logits.size))
        if params.is_greedy:
            return int(np.argmax(logits))
        if keeps_whole_vocabulary(params, logits.size):
            return draw_whole_vocabulary(logits, params.temperature, self._rng(seq_id, params).random())
        ids, probs = candidate_weights(logits, params, self._scratch)
        index = self.draw(probs, params, seq_id)
        return index if ids is None else int(ids[index])

    def sample_rows(self, logits: np.ndarray, params: list[SamplingParams], seq_ids: list[int],
                    histories: list[list[int]], num_prompt_tokens: list[int | None]) -> list[int]:
        """sample() for each row of logits [rows, vocab], row i for sequence seq_ids[i]. The rows that draw from
        the whole vocabulary unpenalised (the OpenAI defaults) are drawn together, one row per pool thread: the
        same tokens as sample() row by row, whatever the batch."""
        tokens = [0] * len(params)
        together = [not p.is_greedy and not p.has_penalties and keeps_whole_vocabulary(p, logits.shape[-1])
                    for p in params]
        for i in range(len(params)):
            if not together[i]:
                tokens[i] = self.sample(logits[i], params[i], seq_ids[i], histories[i], num_prompt_tokens[i])
        batched = [i for i in range(len(params)) if together[i]]
        if batched:
            uniforms = np.array([self._rng(seq_ids[i], params[i]).random() for i in batched])
            inverse_temperatures = np.array([1.0 / params[i].temperature for i in batched])
            drawn = _checked_draws(softmax_draw_rows(logits, np.array(batched), inverse_temperatures, uniforms))
            for i, token in zip(batched, drawn.tolist()):
                tokens[i] = token
        return tokens

    def draw(self, probs: np.ndarray, params: SamplingParams, seq_id: int) -> int:
        """An index into probs (zeros allowed, never drawn) from the sequence's own generator, which the device
        sampler draws through too: one uniform number, as Generator.choice(p=probs) uses."""
        return inverse_cdf_index(probs, self._rng(seq_id, params).random())

    def release(self, seq_id: int) -> None:
        self._rngs.pop(seq_id, None)

    def _rng(self, seq_id: int, params: SamplingParams) -> np.random.Generator:
        if seq_id not in self._rngs:
            self._rngs[seq_id] = np.random.default_rng(params.seed)
        return self._rngs[seq_id]
