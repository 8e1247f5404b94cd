"""Layered generation for one request: token steps -> text chunks with stop strings and timing stats."""
from __future__ import annotations

import time
from collections.abc import Iterator

from ..sampling_params import SamplingParams
from ..tokenizer import StreamingDetokenizer
from .llm_engine import LLMEngine
from .outputs import GenerationChunk, GenerationStats
from .stop_strings import StopStringMatcher


def stream_generate(engine: LLMEngine, prompt_token_ids: list[int],
                    params: SamplingParams) -> Iterator[GenerationChunk]:
    """Runs one request to completion, yielding text as it is decoded; the last chunk carries stats."""
    stats = GenerationStats(num_prompt_tokens=len(prompt_token_ids))
    seq = engine.add_request(prompt_token_ids, params)
    detokenizer = StreamingDetokenizer(engine.tokenizer)
    matcher = StopStringMatcher(params.stop)
    started = time.perf_counter()
    first_token_at = None
    try:
        while not seq.is_finished:
            outputs = [o for o in engine.step() if o.seq_id == seq.seq_id]
            for output in outputs:
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                stats.num_completion_tokens += len(output.new_token_ids)
                text = "".join(detokenizer.add_token(t) for t in output.new_token_ids)
                if seq.is_finished:
                    text += detokenizer.flush()
                emit, stopped = matcher.feed(text)
                if stopped:
                    engine.finish(seq, "stop")
                if seq.is_finished:
                    emit += "" if stopped else matcher.flush()
                    _close_stats(stats, started, first_token_at)
                    yield GenerationChunk(emit, output.new_token_ids, seq.finish_reason, stats)
                    return
                yield GenerationChunk(emit, output.new_token_ids)
    finally:
        if not seq.is_finished:
            engine.abort(seq)


def _close_stats(stats: GenerationStats, started: float, first_token_at: float | None) -> None:
    now = time.perf_counter()
    first = first_token_at or now
    stats.prompt_seconds = first - started
    stats.decode_seconds = now - first
