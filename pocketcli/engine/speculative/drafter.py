"""The drafter interface: propose up to k tokens for each running sequence; the target model verifies them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sequence import Sequence


@dataclass
class Draft:
    token_ids: list[int]
    # q: [len(token_ids), vocab] probabilities the draft tokens were sampled from; None = deterministic draft
    # (n-gram lookup, greedy drafting), i.e. q is one-hot on each draft token
    probs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.token_ids)


class Drafter:
    """Subclasses implement `propose`; those that read target hidden states list the layers in `tap_layer_ids`
    and receive them in `observe` after every target forward (prefill chunks and verification alike)."""

    tap_layer_ids: frozenset[int] = frozenset()  # target layers whose outputs this drafter needs

    def propose(self, seqs: list[Sequence], num_draft_tokens: list[int]) -> list[Draft]:
        """Up to num_draft_tokens[i] tokens to follow seqs[i].token_ids (fewer, or none, is fine)."""
        raise NotImplementedError

    def observe(self, seq: Sequence, first_position: int, hidden_by_layer: dict[int, np.ndarray]) -> None:
        """Target hidden states [n, D] of the tapped layers for the verified positions first_position..+n-1."""

    def release(self, seq: Sequence) -> None:
        """The sequence is finished: drop whatever state the drafter keeps for it."""
