"""Adaptive draft length: k follows a running (exponential) average of each sequence's acceptance rate, so a
drafter that keeps missing stops paying for long verification rounds, and one that keeps hitting drafts more."""
from __future__ import annotations


class AdaptiveK:
    def __init__(self, max_k: int, decay: float = 0.7, initial_rate: float = 0.5):
        self.max_k = max_k
        self.decay = decay
        self.initial_rate = initial_rate
        self._rates: dict[int, float] = {}  # seq_id -> running acceptance rate

    def k_for(self, seq_id: int) -> int:
        rate = self._rates.get(seq_id, self.initial_rate)
        # expected accepted run under i.i.d. acceptance is rate / (1 - rate); draft one more than that
        expected_run = rate / max(1.0 - rate, 1e-6)
        return max(1, min(self.max_k, int(expected_run) + 1))

    def update(self, seq_id: int, num_drafted: int, num_accepted: int) -> None:
        if num_drafted == 0:
            return
        rate = self._rates.get(seq_id, self.initial_rate)
        self._rates[seq_id] = self.decay * rate + (1.0 - self.decay) * num_accepted / num_drafted

    def release(self, seq_id: int) -> None:
        self._rates.pop(seq_id, None)
