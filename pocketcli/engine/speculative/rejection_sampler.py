"""Verification rules: which draft tokens the target accepts, and the token it emits after them.

Greedy: accept while the draft equals the target's argmax, then emit the target's argmax.
Sampling (Leviathan et al. 2023, Chen et al. 2023): accept draft x with probability min(1, p(x)/q(x)); on the
first rejection emit a token from norm(max(p - q, 0)); if every draft is accepted, emit a bonus token from p.
The emitted tokens are then distributed exactly as sampling from p one token at a time. A deterministic draft
(n-gram, greedy drafter) has one-hot q, so acceptance is p(x) and the residual is p with x removed.

p comes from the non-speculative sampler's own filters (logit bias, penalties, top-k, top-p, min-p,
temperature), applied in the same order, on the history the target saw at that position.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...sampling_params import SamplingParams
from ..sampler import penalized_logits, vocab_probs

ProbsAt = Callable[[int, list[int]], np.ndarray]  # (position i, tokens accepted so far) -> p_i


def greedy_token(logits: np.ndarray, params: SamplingParams, history_token_ids: list[int],
                 num_prompt_tokens: int) -> int:
    """The token the non-speculative sampler picks at temperature 0."""
    if not params.has_penalties:
        return int(np.argmax(logits))
    return int(np.argmax(penalized_logits(logits, params, history_token_ids, num_prompt_tokens)))


def sampling_probs(logits: np.ndarray, params: SamplingParams, history_token_ids: list[int],
                   num_prompt_tokens: int) -> np.ndarray:
    """The distribution the non-speculative sampler draws from at temperature > 0: [vocab] float64."""
    return vocab_probs(penalized_logits(logits, params, history_token_ids, num_prompt_tokens), params)


def verify_greedy(draft_token_ids: list[int], target_token_at: Callable[[int, list[int]], int]) -> list[int]:
    """Emitted tokens: the accepted prefix of the draft, then the target's own token (correction or bonus)."""
    emitted: list[int] = []
    for i, draft_token in enumerate(draft_token_ids):
        target_token = target_token_at(i, emitted)
        if target_token != draft_token:
            return emitted + [target_token]
        emitted.append(draft_token)
    return emitted + [target_token_at(len(draft_token_ids), emitted)]


def verify_sampled(draft_token_ids: list[int], draft_probs: np.ndarray | None, probs_at: ProbsAt,
                   rng: np.random.Generator) -> list[int]:
    """Emitted tokens under the rejection-sampling rule; draft_probs None means one-hot q on each draft."""
    emitted: list[int] = []
    for i, draft_token in enumerate(draft_token_ids):
        p = probs_at(i, emitted)
        q_draft = 1.0 if draft_probs is None else float(draft_probs[i, draft_token])
        if q_draft > 0.0 and rng.random() * q_draft < p[draft_token]:  # u < p/q, without dividing
            emitted.append(draft_token)
            continue
        return emitted + [draw(residual_probs(p, draft_token, None if draft_probs is None else draft_probs[i]), rng)]
    return emitted + [draw(probs_at(len(draft_token_ids), emitted), rng)]


def residual_probs(p: np.ndarray, draft_token: int, q: np.ndarray | None) -> np.ndarray:
    """norm(max(p - q, 0)); q None = one-hot on draft_token."""
    if q is None:
        residual = p.copy()
        residual[draft_token] = 0.0
    else:
        residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    return residual / total if total > 0 else p  # p == q: a rejection cannot happen, keep p for safety


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    return int(rng.choice(probs.size, p=probs))
