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


def _sample_whole_vocabulary(logits, params, history, num_prompt_tokens, rng):
    """The filters composed on the whole vocabulary, drawn with Generator.choice: the definition the Sampler's
    candidate-only, buffer-reusing path must reproduce token for token."""
    from pocketcli.engine.sampler import apply_logit_bias, apply_presence_frequency_penalty, recent_token_ids

    x = apply_logit_bias(logits.astype(np.float64), params.logit_bias)
    x = apply_repeat_penalty(x, recent_token_ids(history, params), params.repeat_penalty)
    x = apply_presence_frequency_penalty(x, np.asarray(history[num_prompt_tokens:], dtype=np.int64),
                                         params.presence_penalty, params.frequency_penalty)
    if params.is_greedy:
        return int(np.argmax(x))
    x = apply_min_p(apply_top_p(apply_top_k(x, params.top_k), params.top_p), params.min_p)
    return int(rng.choice(x.size, p=softmax(apply_temperature(x, params.temperature))))


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.5])
@pytest.mark.parametrize("top_k, top_p, min_p", [(0, 1.0, 0.0), (40, 0.95, 0.05), (3000, 0.9, 0.0), (0, 0.3, 0.0),
                                                 (0, 1.0, 0.05), (0, 0.999, 0.0)])
@pytest.mark.parametrize("penalized", [False, True])
def test_sampler_draws_what_the_whole_vocabulary_filters_draw(temperature, top_k, top_p, min_p, penalized):
    """Same seed, same tokens, over a vocabulary big enough for the nucleus shortcut (and its fallback, top_p
    0.999) and with float32 logits as the model gives them."""
    vocab_size, num_prompt_tokens = 6000, 10
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=3,
                            repeat_penalty=1.3 if penalized else 1.0, presence_penalty=0.5 if penalized else 0.0,
                            frequency_penalty=0.2 if penalized else 0.0, logit_bias={5: 3.0} if penalized else {})
    data = np.random.default_rng(17)
    sampler, reference_rng = Sampler(), np.random.default_rng(3)
    history = data.integers(0, vocab_size, 20).tolist()
    for _ in range(25):
        logits = (3 * data.standard_normal(vocab_size)).astype(np.float32)
        token = sampler.sample(logits, params, 1, history, num_prompt_tokens)
        assert token == _sample_whole_vocabulary(logits, params, history, num_prompt_tokens, reference_rng)
        history.append(token)


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])  # 40000 N(0, 3) logits: the 1024 guess, the 8192 one, a sort
def test_top_p_guesses_draw_what_the_whole_vocabulary_filters_draw(top_p):
    params = SamplingParams(temperature=0.8, top_k=0, top_p=top_p, min_p=0.0, seed=5)
    data = np.random.default_rng(17)
    sampler, reference_rng = Sampler(), np.random.default_rng(5)
    for _ in range(8):
        logits = (3 * data.standard_normal(40000)).astype(np.float32)
        assert sampler.sample(logits, params, 2, []) == _sample_whole_vocabulary(logits, params, [], 0, reference_rng)


@pytest.mark.parametrize("size", [300, 4096, 5000])  # under one block, whole blocks, a partial last block
def test_draw_matches_generator_choice(size):
    probs = np.random.default_rng(0).random(size) ** 8  # a few likely tokens among many unlikely ones
    probs[::3] = 0.0  # zero-probability tokens are never drawn, as choice never draws them
    probs[1024:2048] = 0.0  # nor is an empty block
    probs /= probs.sum()
    params = SamplingParams(seed=9)
    sampler, rng = Sampler(), np.random.default_rng(9)
    draws = [sampler.draw(probs, params, 4) for _ in range(2000)]
    assert draws == [int(rng.choice(size, p=probs)) for _ in range(2000)]


def test_inverse_cdf_index_at_the_ends():
    from pocketcli.engine.sampler import inverse_cdf_index

    weights = np.zeros(3000)
    weights[[7, 2100, 2500]] = [0.25, 0.5, 0.25]
    assert inverse_cdf_index(weights, 0.0) == 7
    assert inverse_cdf_index(weights, 0.25) == 2100  # the running sum must exceed u, as in searchsorted(right)
    assert inverse_cdf_index(weights, np.nextafter(1.0, 0.0)) == 2500  # never a trailing zero weight
    for bad in (np.zeros(3000), np.full(3000, np.nan)):
        with pytest.raises(ValueError, match="no token can be sampled"):
            inverse_cdf_index(bad, 0.5)


@pytest.mark.parametrize("temperature, vocab_size", [(0.7, 262144), (1.0, 151937)])  # Gemma's; a partial block
def test_whole_vocabulary_draw_is_candidate_weights_draw(temperature, vocab_size):
    """The OpenAI defaults (no top-k/top-p/min-p) draw from unnormalised weights made a chunk at a time: the same
    tokens as the normalised whole-vocabulary probabilities for the same u, seeded draws included, and never a
    token a grammar masked with -inf."""
    from pocketcli.engine.sampler import (candidate_weights, draw_whole_vocabulary, inverse_cdf_index,
                                          keeps_whole_vocabulary)

    params = SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, seed=21)
    assert keeps_whole_vocabulary(params, vocab_size)
    assert not keeps_whole_vocabulary(SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0), vocab_size)
    data, sampler, reference_rng = np.random.default_rng(4), Sampler(), np.random.default_rng(21)
    for _ in range(20):
        logits = (4 * data.standard_normal(vocab_size)).astype(np.float32)
        logits[::7] = -np.inf
        ids, probs = candidate_weights(logits, params)
        token = sampler.sample(logits, params, 3, [])
        assert ids is None and token == inverse_cdf_index(probs, reference_rng.random())
        assert np.isfinite(logits[token])
        for u in data.random(10):
            assert draw_whole_vocabulary(logits, temperature, u) == inverse_cdf_index(probs, u)


def _server_default_params(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0, seed=seed)


def test_sample_rows_draws_each_row_as_sample_does_alone():
    """A seed and a logits row give the same token sampled alone or inside a batch of 8, whatever the other rows'
    params (greedy, top-k, penalties: drawn one by one) and whatever the pool's thread count."""
    import numba

    vocab_size, num_rows, num_steps = 262144, 8, 4
    data = np.random.default_rng(8)
    params = [_server_default_params(seed) for seed in range(num_rows)]
    params[2] = SamplingParams(temperature=0.0)
    params[5] = SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.0, seed=5)
    params[6] = SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0, seed=6, presence_penalty=0.5)
    histories = [[1, 2, 3] for _ in range(num_rows)]
    batched, alone = Sampler(), [Sampler() for _ in range(num_rows)]
    for step in range(num_steps):
        logits = (4 * data.standard_normal((num_rows, vocab_size))).astype(np.float32)
        numba.set_num_threads(1 + step % numba.config.NUMBA_NUM_THREADS)
        tokens = batched.sample_rows(logits, params, list(range(num_rows)), histories, [3] * num_rows)
        expected = [alone[i].sample(logits[i], params[i], i, histories[i], 3) for i in range(num_rows)]
        assert tokens == expected
        assert len(set(tokens)) > num_rows // 2  # rows draw from their own logits and seeds, not a shared one
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_sample_rows_refuses_a_row_with_no_token():
    logits = np.zeros((3, 5000), dtype=np.float32)
    logits[1, 17] = np.nan
    params = [_server_default_params(seed) for seed in range(3)]
    with pytest.raises(ValueError, match="no token can be sampled"):
        Sampler().sample_rows(logits, params, [0, 1, 2], [[], [], []], [0, 0, 0])


@pytest.mark.parametrize("seed", range(6))
def test_kth_largest_equals_a_full_partition(seed):
    """The block-maxima floor only prunes: ties, -inf (masked tokens), a tail past the last block and every k."""
    from pocketcli.engine.sampler import VocabScratch, kth_largest

    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300_000))
    values = rng.standard_normal(size) * 3
    if seed % 2:
        values = np.round(values)
    values[rng.integers(0, size, size // 3)] = -np.inf
    for k in {1, 2, 40, int(rng.integers(1, size + 1)), size}:
        assert kth_largest(values, k, VocabScratch()) == np.sort(values)[size - k]
