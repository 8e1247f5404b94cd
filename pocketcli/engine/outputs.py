"""Typed results flowing out of the engine: per-step token outputs and streamed text chunks."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepOutput:
    seq_id: int
    new_token_ids: list[int]
    finish_reason: str | None = None  # "stop" | "length" | None while running


@dataclass
class GenerationStats:
    num_prompt_tokens: int = 0
    num_completion_tokens: int = 0
    prompt_seconds: float = 0.0  # time to first token (prefill + first sample)
    decode_seconds: float = 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.num_prompt_tokens / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        decoded = self.num_completion_tokens - 1  # the first token comes with the prefill
        return decoded / self.decode_seconds if decoded > 0 and self.decode_seconds else 0.0


@dataclass
class GenerationChunk:
    text: str  # newly completed text (never a broken UTF-8 sequence)
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stats: GenerationStats | None = None
