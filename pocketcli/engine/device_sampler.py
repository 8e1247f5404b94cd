"""Greedy and top-k sampling next to device logits: only each row's best k + 1 values and token ids come back
to the host (k = 1 for greedy), never the whole vocabulary.

A row qualifies when it needs nothing but the top-k candidates: greedy, or temperature > 0 with 1 <= top_k
< MAX_TOP_K, and no penalties, logit bias, grammar or logprobs. The draw then equals the host Sampler's exactly:
the candidates are the same tokens in the same (ascending id) order, filtered by the same candidate_probs, drawn
with the sequence's own generator. The one extra value per row detects a tie at the k-th place (the host keeps
every tied token): such a row copies its full logits and takes the host path.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .model_runner import check_logits
from .sampler import Sampler, candidate_probs


class DeviceSampler:
    def __init__(self, ops, sampler: Sampler):
        self.ops = ops  # a device backend: top_k_on_device(logits, k), to_host
        self.sampler = sampler
        self.max_top_k = int(ops.MAX_TOP_K) - 1  # one slot kept for the tie check

    def can_sample(self, items) -> bool:
        """Whether every sampling row of the batch can be drawn from its top-k candidates."""
        return bool(items) and all(self._qualifies(item.seq) for item in items)

    def _qualifies(self, seq) -> bool:
        params = seq.params
        if seq.constraint is not None or params.logprobs is not None or params.has_penalties:
            return False
        return params.is_greedy or 1 <= params.top_k <= self.max_top_k

    def sample(self, logits, items) -> list[int]:
        """logits: device array [len(items), vocab] -> one token id per row."""
        vocab_size = logits.shape[1]
        num_fetched = min(vocab_size, 1 + max(0 if item.seq.params.is_greedy else item.seq.params.top_k
                                              for item in items))
        values, ids = (self.ops.to_host(a) for a in self.ops.top_k_on_device(logits, num_fetched))
        check_logits(values)
        return [self._sample_row(logits, row, values[row], ids[row].astype(np.int64), item.seq)
                for row, item in enumerate(items)]

    def _sample_row(self, logits, row: int, values: np.ndarray, ids: np.ndarray, seq) -> int:
        params = seq.params
        if params.is_greedy:
            return int(ids[0])  # the first index among equal maxima, as np.argmax
        k = params.top_k
        if k >= logits.shape[1]:  # top-k keeps the whole vocabulary: the host path
            return self._sample_on_host(logits, row, seq)
        if values[k] == values[k - 1]:  # a tie at the k-th place: the host keeps every tied token
            return self._sample_on_host(logits, row, seq)
        order = np.argsort(ids[:k])  # the host's candidates come in ascending token id
        candidate_ids, candidate_values = ids[:k][order], values[:k][order].astype(np.float64)
        subset, probs = candidate_probs(candidate_values, dataclasses.replace(params, top_k=0))
        return int(candidate_ids[subset[self.sampler.draw(probs, params, seq.seq_id)]])

    def _sample_on_host(self, logits, row: int, seq) -> int:
        host_row = self.ops.to_host(logits[row:row + 1])[0]
        return self.sampler.sample(host_row, seq.params, seq.seq_id, seq.token_ids, seq.num_prompt_tokens)
