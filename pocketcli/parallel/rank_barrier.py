"""A barrier between rank processes that a dead rank cannot wedge.

multiprocessing.Barrier sits on a Condition whose notify waits for every sleeper to acknowledge: a rank killed
while it sleeps there leaves abort() (and everyone else) blocked for good. Here each ordered pair of ranks has
its own semaphore: arriving, a rank posts one token to every other rank, then takes one token from each. Tokens
from a rank that is already a round ahead wait in their own semaphore, so rounds cannot mix. Semaphores hold no
owner, so a rank may die anywhere; abort() sets a shared flag and posts a token everywhere to wake every waiter.
"""
from __future__ import annotations

from .errors import TensorParallelError


class RankStopped(TensorParallelError):
    """The barrier was broken: another rank failed or the group is shutting down."""


class RankBarrier:
    def __init__(self, context, parties: int):
        self.parties = parties
        # tokens[sender][receiver]; the diagonal is unused
        self._tokens = [[context.Semaphore(0) if sender != receiver else None for receiver in range(parties)]
                        for sender in range(parties)]
        self._aborted = context.RawValue("b", 0)  # no lock: one byte, and a lock could die with its holder

    def wait(self, rank: int) -> None:
        self._raise_if_aborted()
        for receiver in range(self.parties):
            if receiver != rank:
                self._tokens[rank][receiver].release()
        for sender in range(self.parties):
            if sender != rank:
                self._tokens[sender][rank].acquire()
                self._raise_if_aborted()

    def abort(self) -> None:
        self._aborted.value = 1
        for row in self._tokens:
            for tokens in row:
                if tokens is not None:
                    tokens.release()

    def _raise_if_aborted(self) -> None:
        if self._aborted.value:
            raise RankStopped("a tensor-parallel rank stopped")
