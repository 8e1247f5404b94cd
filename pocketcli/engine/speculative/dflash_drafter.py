"""DFlash drafting: one non-causal forward of the block [last token, MASK x (B-1)] drafts B-1 tokens (greedy,
as z-lab's reference does), attending to context K/V injected from the target's tapped hidden states.

The drafter keeps, per sequence, the context K/V of every position the target has computed. Rows of rejected
drafts are computed too (the verify pass cannot know yet); they lie past `seq.num_cached_tokens` and are
ignored, then overwritten by the next forward, which starts at that position."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...models.dflash import DFlashModel
from ..sequence import Sequence
from .drafter import Draft, Drafter


@dataclass
class SeqContext:
    keys: list[np.ndarray] = field(default_factory=list)  # per draft layer: [num_rows, KVH, hd]
    values: list[np.ndarray] = field(default_factory=list)
    num_rows: int = 0
    has_gap: bool = False  # a position was never seen (e.g. a prefix-cache hit skipped it): no drafting


class DFlashDrafter(Drafter):
    def __init__(self, model: DFlashModel):
        self.model = model
        self.tap_layer_ids = frozenset(model.config.target_layer_ids)
        self.contexts: dict[int, SeqContext] = {}

    def observe(self, seq: Sequence, first_position: int, hidden_by_layer: dict[int, np.ndarray]) -> None:
        ctx = self.contexts.setdefault(seq.seq_id, SeqContext())
        if first_position > ctx.num_rows:
            ctx.has_gap = True
        if ctx.has_gap:
            return
        features = np.concatenate([hidden_by_layer[layer] for layer in self.model.config.target_layer_ids], axis=1)
        positions = np.arange(first_position, first_position + features.shape[0])
        new_kv = self.model.context_kv(self.model.context_rows(features), positions)
        if not ctx.keys:
            ctx.keys, ctx.values = [k for k, _ in new_kv], [v for _, v in new_kv]
        else:
            ctx.keys = [np.concatenate([old[:first_position], k]) for old, (k, _) in zip(ctx.keys, new_kv)]
            ctx.values = [np.concatenate([old[:first_position], v]) for old, (_, v) in zip(ctx.values, new_kv)]
        ctx.num_rows = first_position + features.shape[0]

    def propose(self, seqs: list[Sequence], num_draft_tokens: list[int]) -> list[Draft]:
        return [self._draft(seq, k) for seq, k in zip(seqs, num_draft_tokens)]

    def _draft(self, seq: Sequence, k: int) -> Draft:
        ctx = self.contexts.get(seq.seq_id)
        num_context = seq.num_cached_tokens  # positions before the last token, all verified
        if k == 0 or ctx is None or ctx.has_gap or ctx.num_rows < num_context:
            return Draft([])
        cfg = self.model.config
        block = np.full(cfg.block_size, cfg.mask_token_id, dtype=np.int64)
        block[0] = seq.token_ids[-1]
        positions = np.arange(num_context, num_context + cfg.block_size)
        context_kv = [(keys[:num_context], values[:num_context]) for keys, values in zip(ctx.keys, ctx.values)]
        logits = self.model.draft_logits(block, positions, context_kv)
        return Draft([int(t) for t in np.argmax(logits, axis=-1)[:k]])

    def release(self, seq: Sequence) -> None:
        self.contexts.pop(seq.seq_id, None)
