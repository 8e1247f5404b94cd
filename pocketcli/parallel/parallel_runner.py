"""Rank 0's model runner: flattens the batch as ModelRunner does, sends the flat inputs to every rank, and
runs its own shard of the same forward; the logits it returns are the whole vocabulary's (gathered)."""
from __future__ import annotations

import time

from ..engine.model_runner import ModelRunner
from ..engine.scheduler import ScheduledBatch
from .forward_step import ForwardStep, run_forward_step


class TensorParallelRunner(ModelRunner):
    def __init__(self, model, kv_cache, group):
        super().__init__(model, kv_cache)
        self.group = group
        self.forward_seconds = 0.0  # rank 0's time in forward passes (bench: the all-reduce share of it)

    def run(self, batch: ScheduledBatch, first_logit_token: int | None = None):
        token_ids, positions, attn, logits_indices = self.prepare_inputs(batch)
        if first_logit_token is not None:
            logits_indices = list(range(first_logit_token, len(token_ids)))
        step = ForwardStep(token_ids, positions, attn, logits_indices)
        self.group.processes.keep_cpu_threads()
        started = time.perf_counter()
        with self.group.collective():
            self.group.send(step)
            hidden, logits = run_forward_step(self.model, self.kv_cache, step)
        self.forward_seconds += time.perf_counter() - started
        self.last_hidden = hidden
        return logits
