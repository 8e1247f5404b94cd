"""Layered generation for one request: token steps -> text chunks with stop strings and timing stats."""
from __future__ import annotations

import time
from collections.abc import Iterator

from ..sampling_params import SamplingParams
from ..tokenizer import StreamingDetokenizer
from .llm_engine import LLMEngine
from .outputs import GenerationChunk, GenerationStats


class StopStringMatcher:
    """Holds back text that could be the start of a stop string; reports where a stop string appears."""

    def __init__(self, stop: list[str]):
        self.stop = [s for s in stop if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, stopped)."""
        self.pending += text
        if not self.stop:
            out, self.pending = self.pending, ""
            return out, False
        hits = [self.pending.find(s) for s in self.stop if s in self.pending]
        if hits:
            out, self.pending = self.pending[:min(hits)], ""
            return out, True
        keep = self._longest_partial_suffix()
        out = self.pending[:len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out

    def _longest_partial_suffix(self) -> int:
        best = 0
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(stop[:n]):
                    best = max(best, n)
                    break
        return best


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
