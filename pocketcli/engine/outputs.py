"""Typed results flowing out of the engine: per-step token outputs and streamed text chunks."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float  # natural log of the model's probability (before sampling filters)
    top: list[tuple[int, float]] = field(default_factory=list)  # (token id, logprob), most likely first


@dataclass
class StepOutput:
    seq_id: int
    new_token_ids: list[int]
    finish_reason: str | None = None  # "stop" | "length" | "abort" | None while running
    logprobs: list[TokenLogprob] | None = None  # one per new token when the request asked for them


@dataclass
class GenerationStats:
    num_prompt_tokens: int = 0
    num_completion_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache
    prompt_seconds: float = 0.0  # time to first token (prefill + first sample)
    decode_seconds: float = 0.0
    # speculative decoding while this request ran (the engine's drafts for every sequence; one request: its own)
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0

    @property
    def draft_acceptance(self) -> float | None:
        """Accepted / drafted tokens; None without drafts."""
        return self.num_accepted_draft_tokens / self.num_draft_tokens if self.num_draft_tokens else None

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
    logprobs: list[TokenLogprob] | None = None
