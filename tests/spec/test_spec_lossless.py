"""Speculative decoding is lossless at temperature 0: the output is token-for-token the non-speculative greedy
output, for the n-gram and draft-model drafters, one sequence or several speculating in the same step."""
import numpy as np
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.engine_factory import make_engine
from pocketcli.engine.speculative import Draft, Drafter
from pocketcli.sampling_params import SamplingParams
from tests.models.tiny_gguf import write_tiny_model

# repeats inside the prompt give the n-gram drafter something to find; the tiny models repeat themselves too
PROMPTS = [[1] + list(range(40, 60)) + list(range(40, 52)),
           [1, 7, 8, 9, 10, 7, 8, 9, 10, 7, 8],
           [1] + [100, 101, 102, 103] * 6]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    return {"target": str(write_tiny_model(root / "target.gguf", "llama", seed=0)),
            # the same weights quantized: a different model with the same vocabulary that mostly agrees
            "draft_q4": str(write_tiny_model(root / "draft_q4.gguf", "llama", seed=0, quant="Q4_0")),
            "qwen3": str(write_tiny_model(root / "qwen3.gguf", "qwen3", seed=3))}


def greedy(engine, prompt, n=32):
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    return [t for chunk in stream_generate(engine, prompt, params) for t in chunk.token_ids]


def engine_for(path, **spec):
    return make_engine(EngineConfig(path, ctx_size=256, block_size=4, **spec))


@pytest.fixture(scope="module")
def expected(models):
    engine = engine_for(models["target"])
    return [greedy(engine, prompt) for prompt in PROMPTS]


@pytest.mark.parametrize("spec", [{"spec": "ngram"}, {"spec": "draft", "draft_model": "draft_q4"},
                                  {"spec": "draft", "draft_model": "target"}])
def test_greedy_speculation_is_lossless(models, expected, spec):
    draft = spec.get("draft_model")
    engine = engine_for(models["target"], spec=spec["spec"], spec_k=5,
                        draft_model_path=models[draft] if draft else None)
    assert [greedy(engine, prompt) for prompt in PROMPTS] == expected
    stats = engine.speculative.stats
    assert stats.num_accepted_tokens > 0  # drafts were accepted, not only rejected
    if draft == "target":
        assert stats.acceptance_rate == 1.0  # a model drafting for itself is always right
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    if draft:
        drafter_blocks = engine.speculative.drafter.engine.block_manager
        assert drafter_blocks.num_free_blocks == drafter_blocks.num_blocks  # shadows released


def test_several_sequences_speculate_in_one_verify_step(models, expected):
    engine = make_engine(EngineConfig(models["target"], ctx_size=256, block_size=4, max_num_seqs=3,
                                      spec="draft", draft_model_path=models["draft_q4"], spec_k=4))
    seqs_with_drafts_per_step = []
    run = engine.runner.run

    def counting_run(batch, **kwargs):
        seqs_with_drafts_per_step.append(sum(1 for item in batch.items if item.num_draft_tokens))
        return run(batch, **kwargs)

    engine.runner.run = counting_run
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    seqs = [engine.add_request(prompt, params) for prompt in PROMPTS]
    while engine.has_unfinished():
        engine.step()
    assert [s.completion_token_ids for s in seqs] == expected
    assert max(seqs_with_drafts_per_step) == 3


class WrongDrafter(Drafter):
    """Always proposes k tokens the target will reject: every round rolls back."""

    def propose(self, seqs, num_draft_tokens):
        return [Draft([s.token_ids[-1] ^ 1] * k) for s, k in zip(seqs, num_draft_tokens)]


def test_rollback_frees_tail_blocks_and_never_caches_rejected_tokens(models, expected):
    engine = engine_for(models["target"], spec="ngram", spec_k=8)
    engine.speculative.drafter, engine.speculative.adaptive_k = WrongDrafter(), None  # k = 8 every round
    manager = engine.block_manager
    seq = engine.add_request(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True))
    blocks_while_verifying = []
    run = engine.runner.run

    def recording_run(batch, **kwargs):
        blocks_while_verifying.append(len(seq.block_table))
        return run(batch, **kwargs)

    engine.runner.run = recording_run
    engine.step()  # prefill
    num_rounds_with_freed_blocks = 0
    while not seq.is_finished:
        engine.step()
        if not seq.is_finished:
            assert len(seq.block_table) == seq.num_blocks  # the rejected drafts' tail blocks went back
            assert seq.num_cached_tokens == len(seq) - 1
            num_rounds_with_freed_blocks += blocks_while_verifying[-1] > seq.num_blocks
    assert num_rounds_with_freed_blocks >= 10  # 8 drafts span two or three 4-token blocks
    assert seq.completion_token_ids == expected[0]
    assert engine.speculative.stats.num_accepted_tokens == 0
    assert manager.num_free_blocks == manager.num_blocks
    aligned = {tuple(seq.token_ids[i:i + 4]) for i in range(0, len(seq) - 3, 4)}
    assert manager.hash_to_block_id  # blocks were cached ...
    for block_id in manager.hash_to_block_id.values():  # ... and none of them holds a rejected draft
        assert manager.blocks[block_id].token_ids in aligned


def test_draft_model_with_another_architecture_but_the_same_vocabulary(models, expected):
    engine = engine_for(models["target"], spec="draft", draft_model_path=models["qwen3"])
    assert greedy(engine, PROMPTS[0]) == expected[0]


def test_sampling_with_speculation_runs_and_counts(models):
    engine = engine_for(models["target"], spec="draft", draft_model_path=models["draft_q4"])
    params = SamplingParams(temperature=0.8, top_k=20, max_tokens=24, ignore_eos=True, seed=5, logprobs=2)
    chunks = list(stream_generate(engine, PROMPTS[2], params))
    tokens = [t for c in chunks for t in c.token_ids]
    logprobs = [lp for c in chunks for lp in c.logprobs]
    assert len(tokens) == 24 and [lp.token_id for lp in logprobs] == tokens
    assert engine.speculative.stats.num_draft_tokens > 0


def test_mtp_without_mtp_weights_is_a_clear_error(models):
    with pytest.raises(ValueError, match="not available for this model"):
        engine_for(models["target"], spec="mtp")


def test_ngram_lookup_prefers_a_match_with_a_whole_continuation():
    from pocketcli.engine.speculative.ngram_drafter import find_ngram_continuation

    tokens = np.array([5, 1, 2, 3, 9, 8, 1, 2, 3, 4, 1, 2])
    assert find_ngram_continuation(tokens, 3, 2, 2) == [3, 4]  # latest match of (1, 2)
    assert find_ngram_continuation(tokens, 3, 2, 3) == [3, 4, 1]
    assert find_ngram_continuation(np.array([7, 7, 7, 7, 7]), 3, 1, 2) == [7, 7]
    assert find_ngram_continuation(np.array([1, 2, 3]), 3, 2, 2) == []


def test_grammar_constrained_speculation_matches_plain_decoding(models):
    """Drafts are cut where the grammar forbids them and every verified position is masked by the grammar."""
    import re

    from pocketcli.sampling_params import StructuredOutputParams

    regex = "[a-f]{10,30}"
    params = SamplingParams(temperature=0.0, max_tokens=40,
                            structured_output=StructuredOutputParams("regex", regex))
    prompt = [1] + list(range(40, 60))

    def generate(engine):
        chunks = list(stream_generate(engine, prompt, params))
        return [t for c in chunks for t in c.token_ids], "".join(c.text for c in chunks)

    plain_tokens, plain_text = generate(engine_for(models["target"]))
    for spec in ({"spec": "ngram"}, {"spec": "draft", "draft_model_path": models["target"]}):
        engine = engine_for(models["target"], **spec)
        tokens, text = generate(engine)
        assert tokens == plain_tokens and re.fullmatch(regex, text.strip())
        assert engine.speculative.stats.num_accepted_tokens > 0
    assert engine.speculative.stats.acceptance_rate == 1.0  # the self-draft follows the grammar too
