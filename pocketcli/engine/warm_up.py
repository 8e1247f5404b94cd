"""A throwaway request run through the engine before it serves: the kernels a long prompt and a decode step use
are compiled (or loaded from numba's cache) then, not inside the first user's request.

Measured with numba's cache emptied (`bench/serve_load.py --rounds 1 --concurrency 1 8`, Gemma 3 270M, 2 cores):
without a warm-up the 8 streams' first tokens took 6.9 s and the first 2000-token prompt's 13.8 s, against 0.9 s
and 3.2 s once compiled. An 80-token warm-up left 9.3 s for that prompt: the per-token ops (embedding rows, norms,
rope) take their threads only past PARALLEL_MIN_WORK values, so the prompt is made that long (410 tokens for
Gemma 3's 640 wide rows: 1.7 s of warm-up with the kernels cached).

Beside it run short companion requests with the OpenAI API's default sampling (no top-k, top-p or min-p cut): their
rows are drawn by the whole-vocabulary kernels (kernels_numba.cpu.softmax_draw), alone and, where the engine can
decode that many sequences, enough together to take the pool; the warm-up request's own cut sampling (the CLI's
defaults) takes the other path. Without them a fresh server's first burst of API-default requests compiled those
kernels on its engine thread while every stream waited: `bench/serve_load.py --concurrency 1 8` on an empty cache,
SmolLM2-135M-Instruct, 2-vCPU AMD EPYC Zen 3: the 8 streams' first tokens took 1.00 s against 0.16-0.20 s.
"""
from __future__ import annotations

from kernels_numba import MAX_RUN_TOKENS, MIN_BLOCKED_QUERIES, PARALLEL_MIN_WORK, use_threads

from ..sampling_params import SamplingParams

# at least: past the fused decode layer's per-call token limit (and, for types without the run layout, tile decode
# + BLAS) and the blocked prefill attention's threshold
WARM_UP_PROMPT_TOKENS = max(MAX_RUN_TOKENS, MIN_BLOCKED_QUERIES) + 16
# `pocket chat`'s load: a first turn's size (a chat template, a system prompt and a question: 20-64 tokens take the
# fused mat-vecs and the blocked attention), so the first reply loads no kernel after Enter
CHAT_WARM_UP_TOKENS = 32
COMPANION_PROMPT_TOKENS = 4  # a companion's prompt: its rows are sampled, its prefill costs next to nothing


def warm_up_prompt_tokens(hidden_size: int, max_chunk_tokens: int, max_model_len: int) -> int:
    """Tokens of the warm-up prompt: enough that its per-token ops go parallel, in one prefill chunk."""
    wanted = max(WARM_UP_PROMPT_TOKENS, PARALLEL_MIN_WORK // hidden_size + 1)
    return max(0, min(wanted, max_chunk_tokens, max_model_len - 3))


def warm_up(engine, prompt_tokens: int | None = None) -> None:
    """Prefill a prompt past the fused mat-vecs' token limit (or of `prompt_tokens`), sample two tokens, and leave
    nothing behind: its blocks freed, the prefix cache and its hit counters empty, speculative statistics fresh."""
    num_tokens = warm_up_prompt_tokens(engine.hparams.hidden_size, engine.config.max_num_batched_tokens,
                                       engine.max_model_len)
    if prompt_tokens is not None:
        num_tokens = max(0, min(prompt_tokens, num_tokens))
    if num_tokens < 1:
        return
    text_ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog. ", add_special=False) or [0]
    prompt = (text_ids * (num_tokens // len(text_ids) + 1))[:num_tokens]
    seqs = [engine.add_request(prompt, SamplingParams(temperature=0.7, max_tokens=2, seed=0, ignore_eos=True))]
    try:
        for i in range(num_companions(engine.config.max_num_seqs, engine.hparams.vocab_size)):
            # the steps before the last sample the companions together, the last the first one alone (one row)
            params = whole_vocabulary_params(max_tokens=3 if i == 0 else 2)
            seqs.append(engine.add_request(prompt[:COMPANION_PROMPT_TOKENS], params))
        while engine.has_unfinished():
            engine.step()
    finally:
        for seq in seqs:
            if not seq.is_finished:
                engine.abort(seq)
        engine.block_manager.clear_prefix_cache()
        if engine.speculative is not None:
            engine.speculative.reset_stats()


def num_companions(max_num_seqs: int, vocab_size: int) -> int:
    """Companion requests beside the warm-up request: one (a single API-default row), or the fewest rows that
    softmax_draw_rows draws on the pool (several, use_threads of rows x vocabulary) where the engine decodes that
    many sequences beside the warm-up request; none for an engine of one sequence (generate and chat, which sample
    with cuts)."""
    if max_num_seqs < 2:
        return 0
    return next((rows for rows in range(2, max_num_seqs) if use_threads(rows * vocab_size)), 1)


def whole_vocabulary_params(max_tokens: int) -> SamplingParams:
    """The OpenAI API's default sampling: temperature 1, no top-k, top-p or min-p cut."""
    return SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=max_tokens, seed=0,
                          ignore_eos=True)
