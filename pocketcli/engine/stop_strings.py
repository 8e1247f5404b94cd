"""Stop strings in streamed text: hold back what could start one, cut where one appears."""
from __future__ import annotations


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
