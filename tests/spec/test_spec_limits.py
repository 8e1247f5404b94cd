"""Drafts never push a step past the scheduler's token budget (max_num_batched_tokens) nor a sequence past the
context length; the output stays the non-speculative greedy output."""
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine_factory import make_engine
from pocketcli.engine.speculative.speculative_decoder import share_token_budget
from pocketcli.sampling_params import SamplingParams
from tests.models.tiny_gguf import write_tiny_model
from tests.spec.test_spec_lossless import PROMPTS


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("limits") / "target.gguf", "llama", seed=0))


def run_all(engine, prompts, max_tokens):
    """Generate greedily for all prompts at once; returns (completions, [(tokens in step, max end position)])."""
    steps, run = [], engine.runner.run

    def recording_run(batch, **kwargs):
        ends = [item.seq.num_cached_tokens + item.num_new_tokens for item in batch.items]
        steps.append((batch.num_tokens, max(ends)))
        return run(batch, **kwargs)

    engine.runner.run = recording_run
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    seqs = [engine.add_request(prompt, params) for prompt in prompts]
    while engine.has_unfinished():
        engine.step()
    return [s.completion_token_ids for s in seqs], steps


def test_drafts_stay_within_the_step_token_budget(target):
    limits = dict(ctx_size=256, block_size=4, max_num_seqs=3, max_num_batched_tokens=7)
    expected, _ = run_all(LLMEngine(EngineConfig(target, **limits)), PROMPTS, 24)
    engine = make_engine(EngineConfig(target, spec="draft", draft_model_path=target, spec_k=6, **limits))
    engine.speculative.adaptive_k = None  # always ask for 6 drafts per sequence: 3 x (1 + 6) > 7
    completions, steps = run_all(engine, PROMPTS, 24)
    assert completions == expected
    assert max(num_tokens for num_tokens, _ in steps) == 7  # the budget is used, never exceeded
    assert engine.speculative.stats.num_accepted_tokens > 0


def test_drafts_stop_at_the_context_length(target):
    prompt = PROMPTS[0]  # 33 tokens, a context of 45: the last rounds must draft fewer than k tokens
    limits = dict(ctx_size=45, block_size=4)
    expected, _ = run_all(LLMEngine(EngineConfig(target, **limits)), [prompt], 32)
    engine = make_engine(EngineConfig(target, spec="draft", draft_model_path=target, spec_k=5, **limits))
    engine.speculative.adaptive_k = None
    completions, steps = run_all(engine, [prompt], 32)
    assert completions == expected and len(prompt) + len(completions[0]) == 45
    assert max(end for _, end in steps) <= 45  # no K/V written past the context
    assert engine.speculative.stats.acceptance_rate == 1.0


def test_token_budget_is_shared_fairly():
    assert share_token_budget([6, 6, 6], 7) == [2, 2, 3]
    assert share_token_budget([1, 6, 6], 7) == [1, 3, 3]
    assert share_token_budget([2, 0, 9], 100) == [2, 0, 9]
    assert share_token_budget([4, 4], 0) == [0, 0]
    assert share_token_budget([], 5) == []
