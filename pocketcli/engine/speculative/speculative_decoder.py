"""One speculative step for a whole batch: draft -> verify every draft of every sequence in ONE target forward
over the paged KV cache -> accept/reject -> roll back the KV of rejected drafts.

Rollback: draft tokens are appended to the sequence only for the verification forward; afterwards they are
taken off again, the emitted tokens (accepted drafts + the target's token) are appended with the usual stop
checks, `num_cached_tokens` grows by the accepted drafts only (so the prefix cache never hashes a block holding
a rejected token), and tail blocks that held only rejected drafts are freed.
Positions of rejected drafts inside a kept block are simply overwritten by the next forward.
"""
from __future__ import annotations

import numpy as np

from ..outputs import StepOutput
from ..scheduler import ScheduledBatch, ScheduledSeq
from ..sequence import Sequence
from .adaptive_k import AdaptiveK
from .drafter import Draft, Drafter
from .grammar_cursor import GrammarCursor
from .rejection_sampler import greedy_token, sampling_probs, verify_greedy, verify_sampled
from .spec_stats import SpecStats


class SpeculativeDecoder:
    def __init__(self, engine, drafter: Drafter, max_k: int, adaptive: bool = True):
        self.engine = engine
        self.drafter = drafter
        self.max_k = max_k
        self.adaptive_k = AdaptiveK(max_k) if adaptive else None
        self.stats = SpecStats()  # all sequences since the engine started (generate --json, server /metrics)
        self._rngs: dict[int, np.random.Generator] = {}
        if drafter.tap_layer_ids:
            engine.model.tap_layer_ids = frozenset(engine.model.tap_layer_ids | drafter.tap_layer_ids)

    def reset_stats(self) -> None:
        """Fresh statistics and draft length, as at the start (after the engine's warm-up request)."""
        self.stats = SpecStats()
        if self.adaptive_k is not None:
            self.adaptive_k = AdaptiveK(self.max_k)

    # ---- the step

    def step(self, batch: ScheduledBatch) -> list[StepOutput]:
        decodes = [item for item in batch.items if item.seq.num_uncached_tokens == 1]
        drafts = self._propose(decodes, self._spare_tokens(batch))
        for item, draft in zip(decodes, drafts):
            self._attach_draft(item, draft)
        draft_of = {item.seq.seq_id: draft for item, draft in zip(decodes, drafts)}
        logits = self.engine.runner.run(batch)  # rows: 1 + num_draft_tokens per sampling item
        self._observe_hidden(batch)
        sampling_items = [item for item in batch.items if item.samples_token]
        bounds = np.cumsum([0] + [1 + item.num_draft_tokens for item in sampling_items])
        rows = [logits[bounds[i]:bounds[i + 1]] for i in range(len(sampling_items))]
        emitted = [self._verify(item, item_rows, draft_of.get(item.seq.seq_id))
                   for item, item_rows in zip(sampling_items, rows)]
        for item in sampling_items:
            self._remove_draft(item)
        appended = self.engine.scheduler.postprocess_tokens(batch, emitted)
        return [self._output(item, tokens, item_rows)
                for item, tokens, item_rows in zip(sampling_items, appended, rows)]

    def _spare_tokens(self, batch: ScheduledBatch) -> int:
        """Draft tokens this step can still take: the scheduler filled part of its token budget already."""
        return max(0, self.engine.scheduler.config.max_num_batched_tokens - batch.num_tokens)

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
        room = self.engine.max_model_len - len(seq)
        return max(0, min(k, remaining, room))

    def _attach_draft(self, item: ScheduledSeq, draft: Draft) -> None:
        """Append the draft for verification, if the KV blocks for it can be had (ask, then act)."""
        seq = item.seq
        manager = self.engine.block_manager
        if not draft.token_ids or not manager.can_allocate(seq, len(seq) + len(draft)):
            draft.token_ids, draft.probs = [], None
            return
        seq.token_ids.extend(draft.token_ids)
        manager.allocate(seq, len(seq))
        item.num_new_tokens += len(draft)
        item.num_draft_tokens = len(draft)

    def _observe_hidden(self, batch: ScheduledBatch) -> None:
        """Hand tapped target hidden states of every computed position to the drafter (drafts included: a
        drafter must keep only the rows of positions that end up accepted, see `observe`)."""
        if not self.drafter.tap_layer_ids:
            return
        taps, start = self.engine.model.tapped_hidden, 0
        for item in batch.items:
            end = start + item.num_new_tokens
            self.drafter.observe(item.seq, item.seq.num_cached_tokens,
                                 {layer: hidden[start:end] for layer, hidden in taps.items()})
            start = end

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

    def _output(self, item: ScheduledSeq, tokens: list[int], logits: np.ndarray) -> StepOutput:
        seq = item.seq
        if seq.params.logprobs is None:
            logprobs = None
        else:
            logprobs = [lp for row, token in zip(logits, tokens)
                        for lp in self.engine._logprobs(row, seq.params, token)]
        if seq.is_finished:
            self.engine.sampler.release(seq.seq_id)
            self.release(seq)
        else:  # the accepted drafts' K/V were computed by the verify pass; rejected ones' tail blocks go back
            seq.num_cached_tokens += len(tokens) - 1
            self.engine.block_manager.cache_full_blocks(seq)
            self.engine.block_manager.free_tail(seq)
        return StepOutput(seq.seq_id, tokens, seq.finish_reason, logprobs)

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
