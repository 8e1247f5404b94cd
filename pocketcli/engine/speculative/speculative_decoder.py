"""Speculative decoding as a stage of the engine step (LLMEngine.step): `propose` drafts for the decoding
sequences before the forward (they ride along in the batch), the engine's forward verifies every draft of every
sequence in ONE target pass over the paged KV cache, `verify` turns each sampling item's logits rows into the
tokens to emit (accept/reject), and after the scheduler appended them `settle` rolls back the KV of rejected drafts.

Rollback: draft tokens are appended to the sequence only for the verification forward; afterwards they are
taken off again, the emitted tokens (accepted drafts + the target's token) are appended with the usual stop
checks, `num_cached_tokens` grows by the accepted drafts only (so the prefix cache never hashes a block holding
a rejected token), and tail blocks that held only rejected drafts are freed.
Positions of rejected drafts inside a kept block are simply overwritten by the next forward.
"""
from __future__ import annotations

import numpy as np

from ..block_manager import BlockManager
from ..scheduler import ScheduledBatch, ScheduledSeq
from ..sequence import Sequence
from .adaptive_k import AdaptiveK
from .drafter import Draft, Drafter
from .grammar_cursor import GrammarCursor
from .rejection_sampler import greedy_token, sampling_probs, verify_greedy, verify_sampled
from .spec_stats import SpecStats


class SpeculativeDecoder:
    def __init__(self, drafter: Drafter, max_k: int, block_manager: BlockManager, max_model_len: int,
                 max_num_batched_tokens: int, adaptive: bool = True):
        """block_manager: the target's KV blocks (drafts take blocks for the verify pass, rejected ones give
        them back); max_model_len, max_num_batched_tokens: the limits a draft must stay within."""
        self.drafter = drafter
        self.max_k = max_k
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.adaptive_k = AdaptiveK(max_k) if adaptive else None
        self.stats = SpecStats()  # all sequences since the engine started (generate --json, server /metrics)
        self._rngs: dict[int, np.random.Generator] = {}
        self._drafts: dict[int, Draft] = {}  # seq id -> its draft, from propose to verify within one step

    @property
    def tap_layer_ids(self) -> frozenset[int]:
        """The target layers whose hidden states the drafter reads (the engine keeps them at each forward)."""
        return self.drafter.tap_layer_ids

    def reset_stats(self) -> None:
        """Fresh statistics and draft length, as at the start (after the engine's warm-up request)."""
        self.stats = SpecStats()
        if self.adaptive_k is not None:
            self.adaptive_k = AdaptiveK(self.max_k)

    # ---- before the forward: draft

    def propose(self, batch: ScheduledBatch) -> None:
        """Drafts for the batch's decoding sequences, appended to them for this step's forward to verify."""
        decodes = [item for item in batch.items if item.seq.num_uncached_tokens == 1]
        drafts = self._propose(decodes, self._spare_tokens(batch))
        for item, draft in zip(decodes, drafts):
            self._attach_draft(item, draft)
        self._drafts = {item.seq.seq_id: draft for item, draft in zip(decodes, drafts)}

    def _spare_tokens(self, batch: ScheduledBatch) -> int:
        """Draft tokens this step can still take: the scheduler filled part of its token budget already."""
        return max(0, self.max_num_batched_tokens - batch.num_tokens)

    def _propose(self, decodes: list[ScheduledSeq], spare_tokens: int) -> list[Draft]:
        seqs = [item.seq for item in decodes]
        ks = share_token_budget([self._num_draft_tokens(seq) for seq in seqs], spare_tokens)
        if not any(ks):
            return [Draft([]) for _ in seqs]
        return [self._trimmed(seq, draft, k) for seq, draft, k in zip(seqs, self.drafter.propose(seqs, ks), ks)]

    @staticmethod
    def _trimmed(seq: Sequence, draft: Draft, k: int) -> Draft:
        """At most k tokens, cut at the first one the sequence's grammar forbids (the target could never accept it)."""
        num_tokens = min(k, len(draft))
        if seq.constraint is not None and num_tokens:
            num_tokens = seq.constraint.validate_tokens(draft.token_ids[:num_tokens])
        return Draft(draft.token_ids[:num_tokens], None if draft.probs is None else draft.probs[:num_tokens])

    def _num_draft_tokens(self, seq: Sequence) -> int:
        k = self.adaptive_k.k_for(seq.seq_id) if self.adaptive_k else self.max_k
        remaining = seq.params.max_tokens - seq.num_completion_tokens - 1  # the target adds one token itself
        room = self.max_model_len - len(seq)
        return max(0, min(k, remaining, room))

    def _attach_draft(self, item: ScheduledSeq, draft: Draft) -> None:
        """Append the draft for verification, if the KV blocks for it can be had (ask, then act)."""
        seq = item.seq
        manager = self.block_manager
        if not draft.token_ids or not manager.can_allocate(seq, len(seq) + len(draft)):
            draft.token_ids, draft.probs = [], None
            return
        seq.token_ids.extend(draft.token_ids)
        manager.allocate(seq, len(seq))
        item.num_new_tokens += len(draft)
        item.num_draft_tokens = len(draft)

    # ---- after the forward: the drafter sees the target's hidden states, the drafts are verified

    def observe(self, batch: ScheduledBatch, taps: dict[int, np.ndarray]) -> None:
        """Hand tapped target hidden states (layer id -> [batch tokens, D]) of every computed position to the
        drafter (drafts included: a drafter must keep only the rows of positions that end up accepted, see
        `observe`)."""
        if not self.drafter.tap_layer_ids:
            return
        start = 0
        for item in batch.items:
            end = start + item.num_new_tokens
            self.drafter.observe(item.seq, item.seq.num_cached_tokens,
                                 {layer: hidden[start:end] for layer, hidden in taps.items()})
            start = end

    def verify(self, items: list[ScheduledSeq], logits: np.ndarray) -> list[list[int]]:
        """logits: 1 + num_draft_tokens rows per sampling item -> the tokens each emits (its accepted drafts,
        then the target's own); the drafts are taken off the sequences again (the scheduler appends these)."""
        bounds = np.cumsum([0] + [1 + item.num_draft_tokens for item in items])
        emitted = [self._verify(item, logits[bounds[i]:bounds[i + 1]], self._drafts.get(item.seq.seq_id))
                   for i, item in enumerate(items)]
        for item in items:
            self._remove_draft(item)
        self._drafts = {}
        return emitted

    # ---- verification

    def _verify(self, item: ScheduledSeq, logits: np.ndarray, draft: Draft | None) -> list[int]:
        seq, params = item.seq, item.seq.params
        draft_token_ids = seq.token_ids[len(seq) - item.num_draft_tokens:]
        base = seq.token_ids[:len(seq) - item.num_draft_tokens]
        grammar = GrammarCursor(seq.constraint)
        if params.is_greedy:
            def target_token_at(i, accepted):
                row = grammar.mask(logits[i], accepted)
                return greedy_token(row, params, base + accepted, seq.num_prompt_tokens)
            tokens = verify_greedy(draft_token_ids, target_token_at)
        else:
            def probs_at(i, accepted):
                row = grammar.mask(logits[i], accepted)
                return sampling_probs(row, params, base + accepted, seq.num_prompt_tokens)
            draft_probs = draft.probs if draft is not None else None
            tokens = verify_sampled(draft_token_ids, draft_probs, probs_at, self._rng(seq))
        grammar.undo()  # postprocessing advances the grammar again, token by token, as it appends
        if item.num_draft_tokens:
            self._record(seq, item.num_draft_tokens, len(tokens) - 1, len(tokens))
        return tokens

    def _record(self, seq: Sequence, num_drafted: int, num_accepted: int, num_emitted: int) -> None:
        self.stats.record(num_drafted, num_accepted, num_emitted)
        if self.adaptive_k:
            self.adaptive_k.update(seq.seq_id, num_drafted, num_accepted)

    @staticmethod
    def _remove_draft(item: ScheduledSeq) -> None:
        """Take the drafts off the sequence: postprocessing appends the emitted tokens (accepted drafts first)
        with the usual stop checks, and only then are accepted positions counted as computed (`_output`)."""
        if item.num_draft_tokens:
            del item.seq.token_ids[len(item.seq) - item.num_draft_tokens:]  # never given to the grammar
            item.num_new_tokens -= item.num_draft_tokens

    # ---- after the scheduler appended the tokens

    def settle(self, item: ScheduledSeq, tokens: list[int]) -> None:
        """A running sequence keeps the K/V its accepted drafts got from the verify pass; the tail blocks that
        held only rejected drafts go back."""
        seq = item.seq
        seq.num_cached_tokens += len(tokens) - 1
        self.block_manager.cache_full_blocks(seq)
        self.block_manager.free_tail(seq)

    # ---- per-sequence state

    def _rng(self, seq: Sequence) -> np.random.Generator:
        if seq.seq_id not in self._rngs:
            self._rngs[seq.seq_id] = np.random.default_rng(seq.params.seed)
        return self._rngs[seq.seq_id]

    def release(self, seq: Sequence) -> None:
        self._rngs.pop(seq.seq_id, None)
        if self.adaptive_k:
            self.adaptive_k.release(seq.seq_id)
        self.drafter.release(seq)


def share_token_budget(wanted: list[int], budget: int) -> list[int]:
    """Draft lengths within `budget` tokens in all: each sequence gets what it wants up to an equal share, and
    shares that short sequences leave unused go to the others (water-filling), so no sequence starves."""
    granted = [0] * len(wanted)
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    for rank, i in enumerate(order):
        granted[i] = min(wanted[i], budget // (len(order) - rank))
        budget -= granted[i]
    return granted
