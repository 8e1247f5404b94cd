"""The server's warm-up request (default model): it runs prefill past the fused mat-vecs' limit and a decode step,
then leaves the engine as it found it."""
from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine.warm_up import WARM_UP_PROMPT_TOKENS, warm_up
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams


def greedy(engine, prompt_ids):
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    return [t for chunk in stream_generate(engine, prompt_ids, params) for t in chunk.token_ids]


def test_warm_up_leaves_no_blocks_cache_entries_or_counts_behind():
    engine = LLMEngine(EngineConfig(resolve_model(None), ctx_size=256, max_num_seqs=2, block_size=16))
    ids = engine.tokenizer.encode("The capital of France is", add_special=True)
    before = greedy(engine, ids)
    engine.block_manager.clear_prefix_cache()
    steps = []
    original_step = engine.step
    engine.step = lambda: steps.append(1) or original_step()
    warm_up(engine)
    del engine.step
    manager = engine.block_manager
    assert len(steps) >= 2  # the prefill (its last chunk samples the first token) and a decode step
    assert WARM_UP_PROMPT_TOKENS > 64 and not engine.has_unfinished()
    assert manager.num_free_blocks == manager.num_blocks and not manager.hash_to_block_id
    assert manager.num_prefix_query_tokens == manager.num_prefix_hit_tokens == 0
    assert all(block.hash == -1 and block.ref_count == 0 for block in manager.blocks)
    assert greedy(engine, ids) == before  # and the engine still serves, alike


def test_warm_up_prompt_crosses_the_threading_thresholds_within_one_chunk():
    from pocketcli.engine.warm_up import warm_up_prompt_tokens
    assert warm_up_prompt_tokens(640, 512, 2256) == 410  # 640 x 410 > PARALLEL_MIN_WORK (2^18)
    assert warm_up_prompt_tokens(4096, 512, 2256) == WARM_UP_PROMPT_TOKENS
    assert warm_up_prompt_tokens(640, 256, 2256) == 256
    assert warm_up_prompt_tokens(640, 512, 100) == 97
    assert warm_up_prompt_tokens(640, 512, 2) == 0


def test_warm_up_skips_a_context_too_small_for_any_prompt():
    engine = LLMEngine(EngineConfig(resolve_model(None), ctx_size=3, max_num_seqs=1, block_size=16))
    warm_up(engine)
    assert not engine.has_unfinished() and engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_chat_warm_up_is_a_first_turns_size():
    from pocketcli.engine.warm_up import CHAT_WARM_UP_TOKENS
    from kernels_numba import MAX_RUN_TOKENS, MIN_BLOCKED_QUERIES

    # a first chat turn (template, system prompt, question) takes the fused mat-vecs and the blocked attention
    assert MIN_BLOCKED_QUERIES <= CHAT_WARM_UP_TOKENS <= MAX_RUN_TOKENS
