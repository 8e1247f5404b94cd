"""Smoke on the default model: n-gram and draft-model speculation give the non-speculative greedy tokens."""
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine_factory import make_engine
from pocketcli.engine.speculative import VocabularyMismatchError
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams
from tests.models.tiny_gguf import write_tiny_model

PROMPT = ("Copy this list: apples, pears, plums, cherries, apples, pears, plums, cherries, apples, pears, plums, "
          "cherries. Copy: apples, pears,")


def greedy(engine, prompt_ids, n=10):
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    return [t for chunk in stream_generate(engine, prompt_ids, params) for t in chunk.token_ids]


@pytest.fixture(scope="module")
def model_path():
    return resolve_model(None)


@pytest.fixture(scope="module")
def baseline(model_path):
    engine = LLMEngine(EngineConfig(model_path, ctx_size=128))
    ids = engine.tokenizer.encode(PROMPT, add_special=True)
    return ids, greedy(engine, ids)


@pytest.mark.parametrize("spec", ["ngram", "draft"])
def test_default_model_speculation_matches_plain_greedy(model_path, baseline, spec):
    ids, expected = baseline
    engine = make_engine(EngineConfig(model_path, ctx_size=128, spec=spec, spec_k=4,
                                      draft_model_path=model_path if spec == "draft" else None))
    assert greedy(engine, ids) == expected
    assert engine.speculative.stats.num_accepted_tokens > 0


def test_draft_model_with_another_vocabulary_is_refused(model_path, tmp_path):
    tiny = write_tiny_model(tmp_path / "tiny.gguf", "llama")
    with pytest.raises(VocabularyMismatchError, match="vocabulary"):
        make_engine(EngineConfig(str(tiny), ctx_size=64, spec="draft", draft_model_path=model_path))
