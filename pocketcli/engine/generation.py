"""Layered generation for one request: token steps -> text chunks with stop strings and timing stats."""
from __future__ import annotations

from collections.abc import Iterator

from ..sampling_params import SamplingParams
from .llm_engine import LLMEngine
from .outputs import GenerationChunk
from .request_stream import RequestStream


def stream_generate(engine: LLMEngine, prompt_token_ids: list[int],
                    params: SamplingParams) -> Iterator[GenerationChunk]:
    """Runs one request to completion, yielding text as it is decoded; the last chunk carries stats."""
    seq = engine.add_request(prompt_token_ids, params)
    stream = RequestStream(engine, seq)
    try:
        while not seq.is_finished:
            for output in [o for o in engine.step() if o.seq_id == seq.seq_id]:
                chunk = stream.process(output)
                yield chunk
                if chunk.finish_reason:
                    return
    finally:
        if not seq.is_finished:
            engine.abort(seq)
