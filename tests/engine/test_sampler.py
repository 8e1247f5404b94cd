import numpy as np
import pytest

from pocketcli.engine.sampler import (Sampler, apply_min_p, apply_repeat_penalty, apply_temperature, apply_top_k,
                                      apply_top_p, softmax)
from pocketcli.sampling_params import SamplingParams

LOGITS = np.array([1.0, 3.0, 2.0, -1.0, 0.5])


def test_top_k_keeps_k_largest():
    out = apply_top_k(LOGITS, 2)
    assert np.isfinite(out).tolist() == [False, True, True, False, False]


def test_top_k_zero_is_identity():
    assert np.array_equal(apply_top_k(LOGITS, 0), LOGITS)


def test_top_p_keeps_smallest_prefix_reaching_mass():
    probs = softmax(LOGITS)
    order = np.argsort(-LOGITS)
    mass_two = probs[order[:2]].sum()
    out = apply_top_p(LOGITS, mass_two - 1e-6)
    assert set(np.flatnonzero(np.isfinite(out))) == set(order[:2])
    assert np.isfinite(apply_top_p(LOGITS, 1e-9)).sum() == 1


def test_min_p_relative_to_max():
    probs = softmax(LOGITS)
    out = apply_min_p(LOGITS, 0.3)
    expected = probs >= 0.3 * probs.max()
    assert np.array_equal(np.isfinite(out), expected)


def test_repeat_penalty_divides_positive_multiplies_negative():
    out = apply_repeat_penalty(LOGITS, np.array([1, 3, 1]), 2.0)
    assert out[1] == pytest.approx(1.5) and out[3] == pytest.approx(-2.0)
    assert out[0] == LOGITS[0]


def test_temperature_scales():
    assert np.allclose(apply_temperature(LOGITS, 0.5), LOGITS * 2)


def test_greedy_is_argmax():
    assert Sampler().sample(LOGITS, SamplingParams(temperature=0), 0, []) == 1


def test_seed_reproduces_and_distribution_matches():
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=123)
    draws_a = [Sampler().sample(LOGITS, params, 7, []) for _ in range(3)]
    sampler = Sampler()
    draws = np.array([sampler.sample(LOGITS, params, 1, []) for _ in range(4000)])
    assert len(set(draws_a)) == 1  # a fresh sampler with the same seed starts the same way
    freq = np.bincount(draws, minlength=5) / len(draws)
    assert np.allclose(freq, softmax(LOGITS), atol=0.03)


def test_filters_restrict_support():
    params = SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0, seed=0)
    sampler = Sampler()
    draws = {sampler.sample(LOGITS, params, 0, []) for _ in range(200)}
    assert draws == {1, 2}


def test_invalid_params_rejected():
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)


def test_presence_and_frequency_penalties_count_generated_tokens():
    from pocketcli.engine.sampler import apply_presence_frequency_penalty

    out = apply_presence_frequency_penalty(LOGITS, np.array([1, 1, 2]), presence=0.5, frequency=0.25)
    assert out[1] == pytest.approx(3.0 - 0.5 - 0.5) and out[2] == pytest.approx(2.0 - 0.75)
    assert out[0] == LOGITS[0]


def test_penalties_skip_the_prompt():
    params = SamplingParams(temperature=0, presence_penalty=2.0)
    # token 1 is the argmax; it appears only in the prompt, so it is not penalized
    assert Sampler().sample(LOGITS, params, 0, [1, 1], num_prompt_tokens=2) == 1
    assert Sampler().sample(LOGITS, params, 0, [1, 1], num_prompt_tokens=1) == 2


def test_logit_bias_forces_a_token():
    from pocketcli.engine.sampler import apply_logit_bias

    assert apply_logit_bias(LOGITS, {3: 10.0})[3] == pytest.approx(9.0)
    assert Sampler().sample(LOGITS, SamplingParams(temperature=0, logit_bias={4: 100.0}), 0, []) == 4
    params = SamplingParams(temperature=1.0, logit_bias={1: -100.0, 2: -100.0}, seed=0, top_k=0, min_p=0.0)
    assert 1 not in {Sampler().sample(LOGITS, params, 0, []) for _ in range(50)}


def test_log_softmax_normalizes():
    from pocketcli.engine.sampler import log_softmax

    assert np.exp(log_softmax(LOGITS)).sum() == pytest.approx(1.0)
