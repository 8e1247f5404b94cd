"""One request's view of the engine: its step outputs become text chunks (streaming detokenization, stop strings,
timing stats). Shared by `stream_generate` and the EngineLoop, so every client decodes text the same way."""
from __future__ import annotations

import time

from ..tokenizer import StreamingDetokenizer
from .outputs import GenerationChunk, GenerationStats, StepOutput
from .sequence import Sequence
from .stop_strings import StopStringMatcher


class RequestStream:
    def __init__(self, engine, seq: Sequence):
        self.engine = engine
        self.seq = seq
        self.detokenizer = StreamingDetokenizer(engine.tokenizer)
        self.matcher = StopStringMatcher(seq.params.stop)
        self.stats = GenerationStats(num_prompt_tokens=seq.num_prompt_tokens)
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.spec_at_start = spec_counts(engine)

    def process(self, output: StepOutput) -> GenerationChunk:
        """The chunk for one step output; a stop string finishes the sequence here (its text is cut)."""
        seq = self.seq
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
            self.stats.num_cached_tokens = seq.num_prefix_cached_tokens
        self.stats.num_completion_tokens += len(output.new_token_ids)
        text = "".join(self.detokenizer.add_token(t) for t in output.new_token_ids)
        if seq.is_finished:
            text += self.detokenizer.flush()
        emit, stopped = self.matcher.feed(text)
        if stopped:
            self.engine.finish(seq, "stop")
        if not seq.is_finished:
            return GenerationChunk(emit, output.new_token_ids, logprobs=output.logprobs)
        emit += "" if stopped else self.matcher.flush()
        self._close_stats()
        return GenerationChunk(emit, output.new_token_ids, seq.finish_reason, self.stats, output.logprobs)

    def aborted(self) -> GenerationChunk:
        self._close_stats()
        return GenerationChunk("", [], "abort", self.stats)

    def _close_stats(self) -> None:
        now = time.perf_counter()
        first = self.first_token_at or now
        self.stats.prompt_seconds = first - self.started
        self.stats.decode_seconds = now - first
        spec_now = spec_counts(self.engine)
        if spec_now is not None:
            self.stats.num_draft_tokens = spec_now[0] - self.spec_at_start[0]
            self.stats.num_accepted_draft_tokens = spec_now[1] - self.spec_at_start[1]


def spec_counts(engine) -> tuple[int, int] | None:
    """(drafted, accepted) tokens of the engine's speculative decoder so far; None when it has none."""
    stats = getattr(getattr(engine, "speculative", None), "stats", None)
    return None if stats is None else (stats.num_draft_tokens, stats.num_accepted_tokens)
