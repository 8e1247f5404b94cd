"""A prefix-cache hit must not change what the model generates (default model, greedy)."""
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams

PROMPT = ("You are a helpful assistant. Answer briefly and precisely. The history of the city of Paris begins "
          "with a small settlement on an island in the river Seine. Question: what river flows through Paris?")


@pytest.fixture(scope="module")
def engine():
    return LLMEngine(EngineConfig(resolve_model(None), ctx_size=256, max_num_seqs=2, block_size=16))


def greedy(engine, prompt_ids, n=8):
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    return [t for chunk in stream_generate(engine, prompt_ids, params) for t in chunk.token_ids]


def test_prefix_hit_generates_the_same_tokens(engine):
    ids = engine.tokenizer.encode(PROMPT, add_special=True)
    assert len(ids) > 32
    manager = engine.block_manager
    cold = greedy(engine, ids)
    assert manager.num_prefix_hit_tokens == 0
    warm = greedy(engine, ids)
    assert manager.num_prefix_hit_tokens == (len(ids) - 1) // 16 * 16
    assert warm == cold
    assert manager.num_free_blocks == manager.num_blocks


def test_shared_prefix_in_one_batch_matches_separate_runs(engine):
    base = engine.tokenizer.encode(PROMPT, add_special=True)
    a, b = base + engine.tokenizer.encode(" Seine", add_special=False), base[:-3]
    expected = [greedy(engine, a), greedy(engine, b)]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    seqs = [engine.add_request(ids, params) for ids in (a, b)]
    while engine.has_unfinished():
        engine.step()
    assert [s.completion_token_ids for s in seqs] == expected
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
