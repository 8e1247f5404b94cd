"""At temperature > 0, speculative decoding through the real engine samples the target's distribution: the first
two completion tokens of many seeded requests on a tiny-vocabulary model pass a chi-square test against the exact
two-token distribution (the target's softmax, by teacher forcing), for one-hot (n-gram) and stochastic
(draft-model) drafts; the same test fails when the engine runs a deliberately broken acceptance rule."""
import numpy as np
import pytest

from pocketcli.config import EngineConfig
from pocketcli import engine_factory
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine.speculative import speculative_decoder
from pocketcli.engine.speculative.rejection_sampler import sampling_probs
from pocketcli.sampling_params import SamplingParams
from tests.spec.test_spec_distribution import broken_verify, chi_square_p_value
from tests.spec.tiny_vocab_model import VOCAB_SIZE, write_tiny_vocab_model

# the n-gram drafter proposes 6, 6 (the continuation of the earlier 4, 5), which the target gives p = 0.37 and
# then 0.50: a rejection at either position is frequent, so a wrong residual distribution shows clearly
PROMPT = [1, 4, 5, 6, 6, 5, 7, 4, 5]
NUM_SAMPLES = 2000
PARAMS = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=3, ignore_eos=True)  # 2 drafts, then 1
MIN_EXPECTED_COUNT = 5  # Pearson's statistic needs this many expected per cell; rarer cells are pooled


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec_dist")
    return {"target": str(write_tiny_vocab_model(root / "target.gguf", seed=0)),
            "draft": str(write_tiny_vocab_model(root / "draft.gguf", seed=1))}


def make_engine(path, **spec) -> LLMEngine:
    return engine_factory.make_engine(EngineConfig(path, ctx_size=16, block_size=4, max_num_seqs=32,
                                                   backend="reference", **spec))


@pytest.fixture(scope="module")
def exact_two_token_probs(paths) -> np.ndarray:
    """P(t0, t1) = p(t0 | prompt) * p(t1 | prompt, t0): [V * V], from the target's logits."""
    engine, params = make_engine(paths["target"]), SamplingParams(**PARAMS)
    first = sampling_probs(engine.score(PROMPT)[-1], params, PROMPT, len(PROMPT))
    second = [sampling_probs(engine.score(PROMPT + [t])[-1], params, PROMPT + [t], len(PROMPT))
              for t in range(VOCAB_SIZE)]
    return (first[:, None] * np.stack(second)).ravel()


def sampled_pair_counts(engine: LLMEngine) -> np.ndarray:
    """Counts [V * V] of (first, second) completion tokens over NUM_SAMPLES requests with seeds 0, 1, ..."""
    seqs = [engine.add_request(PROMPT, SamplingParams(**PARAMS, seed=seed)) for seed in range(NUM_SAMPLES)]
    while engine.has_unfinished():
        engine.step()
    pairs = np.array([s.completion_token_ids[:2] for s in seqs])
    return np.bincount(pairs[:, 0] * VOCAB_SIZE + pairs[:, 1], minlength=VOCAB_SIZE ** 2).astype(float)


def pooled_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    rare = probs * counts.sum() < MIN_EXPECTED_COUNT
    return chi_square_p_value(np.append(counts[~rare], counts[rare].sum()), np.append(probs[~rare], probs[rare].sum()))


SPECS = {"ngram": {"spec": "ngram", "spec_k": 3}, "draft": {"spec": "draft", "spec_k": 3}}


def spec_engine(paths, name: str) -> LLMEngine:
    extra = {"draft_model_path": paths["draft"]} if name == "draft" else {}
    return make_engine(paths["target"], **SPECS[name], **extra)


@pytest.mark.parametrize("name", SPECS)
def test_engine_speculative_sampling_follows_the_target_distribution(paths, exact_two_token_probs, name):
    engine = spec_engine(paths, name)
    counts = sampled_pair_counts(engine)
    stats = engine.speculative.stats
    assert stats.num_draft_tokens > NUM_SAMPLES  # most requests verified drafts ...
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens  # ... and saw both outcomes
    assert pooled_p_value(counts, exact_two_token_probs) > 1e-3


@pytest.mark.parametrize("name", SPECS)
def test_engine_with_a_broken_acceptance_rule_fails_the_same_test(paths, exact_two_token_probs, name, monkeypatch):
    monkeypatch.setattr(speculative_decoder, "verify_sampled", broken_verify)
    counts = sampled_pair_counts(spec_engine(paths, name))
    assert pooled_p_value(counts, exact_two_token_probs) < 1e-6
