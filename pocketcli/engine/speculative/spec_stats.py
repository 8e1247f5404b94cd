"""Acceptance counters for speculative decoding.

acceptance_rate = accepted draft tokens / proposed draft tokens (the bonus/correction token is NOT counted).
mean_accepted_length = tokens emitted per verification round, INCLUDING the bonus/correction token
(tau in the EAGLE/DFlash papers, vLLM's "mean acceptance length"): between 1 and k + 1.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecStats:
    num_rounds: int = 0  # verification rounds of one sequence that had at least one draft token
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_emitted_tokens: int = 0  # accepted drafts + one target token per round

    def record(self, num_drafted: int, num_accepted: int, num_emitted: int) -> None:
        self.num_rounds += 1
        self.num_draft_tokens += num_drafted
        self.num_accepted_tokens += num_accepted
        self.num_emitted_tokens += num_emitted

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.num_emitted_tokens / self.num_rounds if self.num_rounds else 0.0

    def as_dict(self) -> dict:
        return {"rounds": self.num_rounds, "draft_tokens": self.num_draft_tokens,
                "accepted_tokens": self.num_accepted_tokens, "acceptance_rate": round(self.acceptance_rate, 4),
                "mean_accepted_length": round(self.mean_accepted_length, 4), "bonus_token_counted": True}
