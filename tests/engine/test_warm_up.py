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


def test_warm_up_draws_api_default_rows_alone_and_together(monkeypatch):
    """A server's warm-up samples rows the way the OpenAI API's defaults do (the whole vocabulary), one row alone
    and, with threads, enough rows at once for the pool's kernel: a fresh server's first burst compiles neither."""
    import numba

    from kernels_numba.cpu import softmax_draw
    from pocketcli.engine.warm_up import num_companions

    calls = []
    for name in ("draw_rows_serial", "draw_rows_parallel"):
        kernel = getattr(softmax_draw, name)
        monkeypatch.setattr(softmax_draw, name,
                            lambda logits, row_ids, *rest, kernel=kernel, name=name:
                            calls.append((name, row_ids.size)) or kernel(logits, row_ids, *rest))
    threads = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        engine = LLMEngine(EngineConfig(resolve_model(None), ctx_size=256, max_num_seqs=8, block_size=16))
        warm_up(engine)
        has_pool = numba.get_num_threads() > 1
        # Gemma 3's 262144-token vocabulary: two rows are enough for the pool (threads as the warm-up had them)
        assert num_companions(8, engine.hparams.vocab_size) == (2 if has_pool else 1)
    finally:
        numba.set_num_threads(threads)
    assert ("draw_rows_serial", 1) in calls
    if has_pool:
        assert ("draw_rows_parallel", 2) in calls
    manager = engine.block_manager
    assert not engine.has_unfinished() and manager.num_free_blocks == manager.num_blocks


def test_companions_follow_the_engine_and_the_vocabulary(monkeypatch):
    import numba

    from pocketcli.engine.warm_up import num_companions

    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    assert num_companions(1, 49152) == 0  # generate, chat: one sequence
    assert num_companions(8, 49152) == 6  # SmolLM2: 6 x 49152 >= 2^18
    assert num_companions(6, 49152) == 1  # too few sequences for the pool: the single row only
    assert num_companions(8, 262144) == 2
    monkeypatch.setattr(numba, "get_num_threads", lambda: 1)
    assert num_companions(8, 49152) == 1
