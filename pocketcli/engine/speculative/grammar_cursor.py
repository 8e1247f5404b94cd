"""Grammar masks along a draft: verification needs the grammar state after each accepted draft token."""
from __future__ import annotations

import numpy as np

from ..sampler import apply_allowed_mask


class GrammarCursor:
    """Walks a sequence's grammar along the accepted drafts during verification, then steps back."""

    def __init__(self, constraint):
        self.constraint = constraint
        self.num_advanced = 0

    def mask(self, logits_row: np.ndarray, accepted: list[int]) -> np.ndarray:
        """logits_row with the tokens the grammar forbids after `accepted` set to -inf."""
        if self.constraint is None:
            return logits_row
        for token_id in accepted[self.num_advanced:]:
            self.constraint.accept(token_id)
        self.num_advanced = len(accepted)
        return apply_allowed_mask(logits_row, self.constraint.allowed_token_mask(logits_row.size))

    def undo(self) -> None:
        if self.constraint is not None and self.num_advanced:
            self.constraint.rollback(self.num_advanced)
        self.num_advanced = 0
