"""The rejection-sampling rule is lossless: emitted tokens follow the target distribution exactly (chi-square on
a tiny vocabulary), and a deliberately broken rule fails the same test."""
import math

import numpy as np
import pytest

from pocketcli.engine.sampler import Sampler, softmax
from pocketcli.engine.speculative.rejection_sampler import draw, sampling_probs, verify_greedy, verify_sampled
from pocketcli.sampling_params import SamplingParams

VOCAB = 6
NUM_TRIALS = 12000


def chi_square_p_value(observed: np.ndarray, expected_probs: np.ndarray) -> float:
    """Upper-tail p-value of Pearson's statistic (Wilson-Hilferty approximation of the chi-square tail)."""
    keep = expected_probs > 0
    assert observed[~keep].sum() == 0, "a token with zero target probability was emitted"
    expected = expected_probs[keep] * observed.sum()
    stat = float(((observed[keep] - expected) ** 2 / expected).sum())
    dof = int(keep.sum()) - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def broken_verify(draft_token_ids, draft_probs, probs_at, rng):
    """The common mistake: on rejection resample from p instead of norm(max(p - q, 0))."""
    emitted = []
    for i, token in enumerate(draft_token_ids):
        p = probs_at(i, emitted)
        q = 1.0 if draft_probs is None else draft_probs[i, token]
        if rng.random() * q < p[token]:
            emitted.append(token)
            continue
        return emitted + [draw(p, rng)]
    return emitted + [draw(probs_at(len(draft_token_ids), emitted), rng)]


def two_token_counts(verify, target: np.ndarray, draft: np.ndarray | None, k: int, seed: int) -> np.ndarray:
    """Decode two tokens with speculation (a second round when the first emits one) NUM_TRIALS times; returns
    counts of (token 0, token 1) pairs. target: [positions, V]; draft: [positions, V] or None (one-hot drafts
    of each position's least likely token, the hardest case for acceptance)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((VOCAB, VOCAB))
    for _ in range(NUM_TRIALS):
        emitted = []
        while len(emitted) < 2:
            offset = len(emitted)
            if draft is None:
                drafts = [int(np.argmin(target[offset + i])) for i in range(k)]
                q = None
            else:
                q = draft[offset:offset + k]
                drafts = [draw(row, rng) for row in q]
            emitted += verify(drafts, q, lambda i, _acc, o=offset: target[o + i], rng)
        counts[emitted[0], emitted[1]] += 1
    return counts


@pytest.fixture(scope="module")
def dists():
    rng = np.random.default_rng(7)
    target = np.stack([softmax(rng.normal(size=VOCAB) * 1.5) for _ in range(8)])
    draft = np.stack([softmax(rng.normal(size=VOCAB) * 1.5) for _ in range(8)])
    return target, draft


@pytest.mark.parametrize("stochastic", [True, False])
def test_speculative_tokens_follow_the_target_distribution(dists, stochastic):
    target, draft = dists
    counts = two_token_counts(verify_sampled, target, draft if stochastic else None, k=3, seed=1)
    expected = np.outer(target[0], target[1]).ravel()
    assert chi_square_p_value(counts.ravel(), expected) > 1e-3


@pytest.mark.parametrize("stochastic", [True, False])
def test_broken_rule_fails_the_same_test(dists, stochastic):
    target, draft = dists
    counts = two_token_counts(broken_verify, target, draft if stochastic else None, k=3, seed=1)
    expected = np.outer(target[0], target[1]).ravel()
    assert chi_square_p_value(counts.ravel(), expected) < 1e-6


def test_sampling_probs_is_what_the_sampler_draws_from():
    """The target distribution used for verification applies the sampler's own filters and penalties."""
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.2, -1.0, -3.0, 0.9], dtype=np.float32)
    params = SamplingParams(temperature=0.7, top_k=6, top_p=0.9, min_p=0.05, repeat_penalty=1.3,
                            presence_penalty=0.4, logit_bias={5: 2.0}, seed=3)
    history, num_prompt = [0, 1, 2, 0, 7], 2
    probs = sampling_probs(logits, params, history, num_prompt)
    sampler = Sampler()
    draws = [sampler.sample(logits, params, 0, history, num_prompt) for _ in range(NUM_TRIALS // 2)]
    counts = np.bincount(draws, minlength=logits.size).astype(float)
    assert (probs == 0).sum() >= 2  # the filters really cut tokens
    assert chi_square_p_value(counts, probs) > 1e-3


def test_greedy_verification_accepts_the_matching_prefix():
    targets = [5, 3, 9, 1]
    assert verify_greedy([5, 3, 7], lambda i, _acc: targets[i]) == [5, 3, 9]
    assert verify_greedy([5, 3, 9], lambda i, _acc: targets[i]) == [5, 3, 9, 1]  # bonus token
    assert verify_greedy([], lambda i, _acc: targets[i]) == [5]
