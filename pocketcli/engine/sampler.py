"""Turns logits into next tokens: small composable filters, applied in llama.cpp's default order.

Order: logit bias -> repetition penalty -> presence/frequency penalties -> top-k -> top-p -> min-p -> temperature -> draw. temperature == 0 is argmax.
"""
from __future__ import annotations

import numpy as np

from ..sampling_params import SamplingParams


def apply_repeat_penalty(logits: np.ndarray, recent_token_ids: np.ndarray, penalty: float) -> np.ndarray:
    if penalty == 1.0 or recent_token_ids.size == 0:
        return logits
    out = logits.copy()
    ids = np.unique(recent_token_ids)
    picked = out[ids]
    out[ids] = np.where(picked > 0, picked / penalty, picked * penalty)
    return out


def apply_presence_frequency_penalty(logits: np.ndarray, generated_token_ids: np.ndarray, presence: float,
                                     frequency: float) -> np.ndarray:
    """OpenAI's penalties: over generated tokens only, presence once per token, frequency per occurrence."""
    if (presence == 0.0 and frequency == 0.0) or generated_token_ids.size == 0:
        return logits
    ids, counts = np.unique(generated_token_ids, return_counts=True)
    out = logits.copy()
    out[ids] -= presence + frequency * counts
    return out


def apply_logit_bias(logits: np.ndarray, logit_bias: dict[int, float]) -> np.ndarray:
    if not logit_bias:
        return logits
    out = logits.copy()
    ids = np.fromiter(logit_bias.keys(), dtype=np.int64, count=len(logit_bias))
    out[ids] += np.fromiter(logit_bias.values(), dtype=np.float64, count=len(logit_bias))
    return out


def apply_allowed_mask(logits: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """Tokens a grammar forbids (allowed False) get -inf; works on one row or a batch [B, vocab] of rows.
    None allows every token."""
    if allowed is None:
        return logits
    return np.where(allowed[..., :logits.shape[-1]], logits, -np.inf)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - np.max(logits)
    return shifted - np.log(np.exp(shifted).sum())


def apply_top_k(logits: np.ndarray, top_k: int) -> np.ndarray:
    if top_k <= 0 or top_k >= logits.size:
        return logits
    kth = np.partition(logits, -top_k)[-top_k]
    return np.where(logits >= kth, logits, -np.inf)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - np.max(logits))
    return shifted / shifted.sum()


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
    if min_p <= 0.0:
        return logits
    # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
    threshold = np.max(logits) + np.log(min_p)
    return np.where(logits >= threshold, logits, -np.inf)


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    return logits / temperature


NUCLEUS_FIRST_GUESS = 1024  # top-p looks at this many best tokens first and sorts the whole vocabulary only if needed


def top_k_candidates(logits: np.ndarray, top_k: int) -> np.ndarray:
    """Ids of the tokens top-k keeps (ties with the k-th value kept, as apply_top_k does), ascending."""
    if top_k <= 0 or top_k >= logits.size:
        return np.arange(logits.size)
    kth = np.partition(logits, -top_k)[-top_k]
    return np.flatnonzero(logits >= kth)


def nucleus_candidates(logits: np.ndarray, top_p: float) -> tuple[np.ndarray, float] | None:
    """A subset surely holding the top-p nucleus, found without sorting the whole vocabulary, as (ids, the
    top-p to apply within the subset); None when the best NUCLEUS_FIRST_GUESS tokens do not reach top_p."""
    if top_p >= 1.0 or logits.size <= 2 * NUCLEUS_FIRST_GUESS:
        return None
    kth = np.partition(logits, -NUCLEUS_FIRST_GUESS)[-NUCLEUS_FIRST_GUESS]
    ids = np.flatnonzero(logits >= kth)
    weights = np.exp(logits - np.max(logits))
    subset_mass, total_mass = weights[ids].sum(), weights.sum()
    if subset_mass < top_p * total_mass:
        return None
    return ids, min(1.0, top_p * total_mass / subset_mass)  # same cut: cumulative / total >= top_p


def penalized_logits(logits: np.ndarray, params: SamplingParams, history_token_ids: list[int],
                     num_prompt_tokens: int | None) -> np.ndarray:
    """The first stage (logit bias, repetition, presence/frequency penalties), as float64. `history_token_ids`:
    prompt + generated tokens; the first `num_prompt_tokens` are the prompt (None: all are generated)."""
    logits = apply_logit_bias(logits.astype(np.float64), params.logit_bias)
    logits = apply_repeat_penalty(logits, recent_token_ids(history_token_ids, params), params.repeat_penalty)
    generated = np.asarray(history_token_ids[num_prompt_tokens or 0:], dtype=np.int64)
    return apply_presence_frequency_penalty(logits, generated, params.presence_penalty, params.frequency_penalty)


def candidate_probs(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, probabilities) after top-k, top-p, min-p and temperature on penalized logits: the same
    distribution as the filters on the whole vocabulary, computed on the few tokens that can survive them."""
    ids = top_k_candidates(logits, params.top_k)
    values = logits[ids]
    top_p, nucleus = params.top_p, nucleus_candidates(values, params.top_p)
    if nucleus is not None:
        subset, top_p = nucleus
        ids, values = ids[subset], values[subset]
    values = apply_min_p(apply_top_p(values, top_p), params.min_p)
    probs = softmax(apply_temperature(values, params.temperature))
    keep = probs > 0
    return ids[keep], probs[keep]


def vocab_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """candidate_probs spread over the whole vocabulary: [vocab] float64."""
    ids, probs = candidate_probs(logits, params)
    out = np.zeros(logits.size, dtype=np.float64)
    out[ids] = probs
    return out


def recent_token_ids(history_token_ids: list[int], params: SamplingParams) -> np.ndarray:
    """The window the repetition penalty looks at."""
    if params.repeat_penalty == 1.0 or params.repeat_last_n == 0:
        return np.empty(0, dtype=np.int64)
    recent = history_token_ids if params.repeat_last_n < 0 else history_token_ids[-params.repeat_last_n:]
    return np.asarray(recent, dtype=np.int64)


class Sampler:
    """Keeps one random generator per sequence so a seed reproduces the same text."""

    def __init__(self):
        self._rngs: dict[int, np.random.Generator] = {}

    def sample(self, logits: np.ndarray, params: SamplingParams, seq_id: int,
               history_token_ids: list[int], num_prompt_tokens: int | None = None) -> int:
        """`history_token_ids`: prompt + generated tokens; the first `num_prompt_tokens` of them are the prompt
        (None: all are generated), which the presence/frequency penalties skip."""
        if params.is_greedy and not params.has_penalties:
            return int(np.argmax(logits))
        logits = penalized_logits(logits, params, history_token_ids, num_prompt_tokens)
        if params.is_greedy:
            return int(np.argmax(logits))
        ids, probs = candidate_probs(logits, params)
        return int(ids[self.draw(probs, params, seq_id)])

    def draw(self, probs: np.ndarray, params: SamplingParams, seq_id: int) -> int:
        """An index into probs, from the sequence's own generator (the device sampler draws through it too)."""
        return int(self._rng(seq_id, params).choice(probs.size, p=probs))

    def release(self, seq_id: int) -> None:
        self._rngs.pop(seq_id, None)

    def _rng(self, seq_id: int, params: SamplingParams) -> np.random.Generator:
        if seq_id not in self._rngs:
            self._rngs[seq_id] = np.random.default_rng(params.seed)
        return self._rngs[seq_id]
