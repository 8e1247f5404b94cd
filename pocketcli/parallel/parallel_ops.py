"""The backend's ops plus the collectives of tensor parallelism, chosen by the weight an op reads.

The model calls `ops.linear(x, w)` as it always does; for a row-parallel weight (attention output, FFN down) the
result is this rank's partial sum, so it is all-reduced here; for the vocabulary-parallel LM head the ranks'
logit columns are gathered. `embedding` looks up the rank's vocabulary rows and all-reduces (one rank has each
token, the others add zeros). Everything else passes straight through to the backend.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from .shard_plan import ShardPlan


# backend ops that run a whole decoder layer in one compiled call (the model falls back to op-by-op without them)
FUSED_LAYER_OPS = frozenset({"plan_decode_layer", "decode_layer", "decode_layers", "compile_decode_step"})


class TensorParallelOps:
    def __init__(self, ops: Any, comm: Any, plan: ShardPlan, rank: int):
        self.backend, self.comm, self.rank = ops, comm, rank
        self.partial_sum_names = plan.partial_sum_names
        self.splits_experts = any(name.endswith("ffn_down_exps.weight") for name in self.partial_sum_names)
        self.vocab_names, self.vocab_spans = plan.vocab_names, plan.vocab_spans
        self.vocab_width = plan.vocab_width
        self.collective_seconds = 0.0  # time spent in all-reduces and gathers (bench reports its share)

    def __getattr__(self, name: str) -> Any:
        if name in FUSED_LAYER_OPS:  # a whole layer in one call has no place for the all-reduces: hide it
            raise AttributeError(name)
        return getattr(self.backend, name)

    # --- the ops that need collectives ---------------------------------------------------------------------
    def linear(self, x, w, out=None):
        y = self.backend.linear(x, w, out)
        if w.name in self.partial_sum_names:
            return self._all_reduce(y)
        if w.name in self.vocab_names:
            return self._gather_vocab(y)
        return y

    def embedding(self, token_ids: np.ndarray, w, out=None):
        if w.name not in self.vocab_names:
            return self.backend.embedding(token_ids, w, out)
        start, stop = self.vocab_spans[self.rank]
        local_ids = np.asarray(token_ids, dtype=np.int64) - start
        mine = (local_ids >= 0) & (local_ids < stop - start)
        rows = self.backend.embedding(np.where(mine, local_ids, 0), w)  # [T, D]; other ranks' rows zeroed below
        return self._all_reduce(self._zero_rows(rows, ~mine))

    def moe_combine(self, expert_out, weights, out=None):
        y = self.backend.moe_combine(expert_out, weights, out)
        return self._all_reduce(y) if self.splits_experts else y  # each rank ran a slice of every expert's FFN

    # --- collectives ----------------------------------------------------------------------------------------
    def _all_reduce(self, y):
        started = time.perf_counter()
        y = self.comm.all_reduce(y)
        self.collective_seconds += time.perf_counter() - started
        return y

    def _gather_vocab(self, logits):
        """logits: [N, this rank's vocab slice] -> [N, vocab] in vocabulary order."""
        started = time.perf_counter()
        widths = [stop - start for start, stop in self.vocab_spans]
        padded = self._pad_columns(logits, self.vocab_width)
        gathered = self.backend.to_host(self.comm.all_gather(padded))  # [ranks, N, vocab_width]
        full = np.concatenate([part[:, :width] for part, width in zip(gathered, widths)], axis=1)
        self.collective_seconds += time.perf_counter() - started
        return self.backend.to_device(full)

    def _pad_columns(self, y, width: int):
        if y.shape[1] == width:
            return y
        host = self.backend.to_host(y)
        padded = np.zeros((host.shape[0], width), dtype=host.dtype)
        padded[:, :host.shape[1]] = host
        return self.backend.to_device(padded)

    def _zero_rows(self, rows, which: np.ndarray):
        if not which.any():
            return rows
        host = self.backend.to_host(rows)  # a device's rows: one small host round trip per forward
        host[which] = 0.0
        return self.backend.to_device(host)
