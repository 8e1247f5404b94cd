"""Draft-model drafting: a smaller model with the same vocabulary proposes k tokens, one batched forward per
draft position for all sequences. It keeps its own paged KV cache, one shadow sequence per target sequence;
before each round the shadow is cut back to the longest prefix it shares with the target (dropping the K/V
of drafts the target rejected) and catches up on the tokens the target accepted or emitted since."""
from __future__ import annotations

import numpy as np

from ..scheduler import ScheduledBatch, ScheduledSeq
from ..sequence import Sequence
from .drafter import Draft, Drafter
from .grammar_cursor import GrammarCursor
from .rejection_sampler import greedy_token, sampling_probs


DRAFT_STREAM_ID = 0x5EED  # mixed into a request's seed for the draft stream


class VocabularyMismatchError(ValueError):
    """The draft model's vocabulary differs from the target's."""


def check_same_vocabulary(target, draft, draft_path: str) -> None:
    target_size, draft_size = target.hparams.vocab_size, draft.hparams.vocab_size
    if target_size != draft_size:
        raise VocabularyMismatchError(f"draft model {draft_path} has a vocabulary of {draft_size} tokens but the "
                                      f"target has {target_size}; a draft model must share the target's vocabulary")
    target_tokens = getattr(target.tokenizer.vocab, "tokens", None)
    draft_tokens = getattr(draft.tokenizer.vocab, "tokens", None)
    if target_tokens is not None and draft_tokens is not None and target_tokens != draft_tokens:
        first = next(i for i, (a, b) in enumerate(zip(target_tokens, draft_tokens)) if a != b)
        raise VocabularyMismatchError(f"draft model {draft_path} has a different vocabulary from the target "
                                      f"(token {first}: {draft_tokens[first]!r} vs {target_tokens[first]!r})")


class DraftModelDrafter(Drafter):
    def __init__(self, draft_engine):
        self.engine = draft_engine  # an LLMEngine used only for its model, runner and block manager
        self.shadows: dict[int, Sequence] = {}  # target seq_id -> the draft model's copy
        self._rngs: dict[int, np.random.Generator] = {}

    def propose(self, seqs: list[Sequence], num_draft_tokens: list[int]) -> list[Draft]:
        drafts = [Draft([]) for _ in seqs]
        probs: list[list[np.ndarray]] = [[] for _ in seqs]
        active = [i for i, k in enumerate(num_draft_tokens) if k > 0]
        shadows = {i: self._sync(seqs[i]) for i in active}
        grammars = {i: GrammarCursor(seqs[i].constraint) for i in active}  # drafts follow the target's grammar
        while active:
            items = self._schedule(shadows, active)
            if not items:
                break
            logits = self.engine.runner.run(ScheduledBatch([item for _, item in items]))
            for (i, item), row in zip(items, logits):
                token, q = self._pick(seqs[i], item.seq, grammars[i].mask(row, drafts[i].token_ids))
                item.seq.num_cached_tokens += item.num_new_tokens
                item.seq.append_token(token)
                drafts[i].token_ids.append(token)
                if q is not None:
                    probs[i].append(q)
            active = [i for i, _ in items if len(drafts[i]) < num_draft_tokens[i]]
        for grammar in grammars.values():
            grammar.undo()
        for draft, q_rows in zip(drafts, probs):
            if q_rows:
                draft.probs = np.stack(q_rows)
        return drafts

    def _sync(self, seq: Sequence) -> Sequence:
        """The shadow of seq, cut back to the prefix it shares with seq and extended with seq's new tokens."""
        shadow = self.shadows.get(seq.seq_id)
        if shadow is None:
            shadow = self.shadows[seq.seq_id] = Sequence(seq.token_ids, seq.params, self.engine.config.block_size)
            shadow.num_prompt_tokens = seq.num_prompt_tokens
            return shadow
        common = _common_prefix_length(shadow.token_ids, seq.token_ids)
        shadow.truncate(common)
        shadow.token_ids.extend(seq.token_ids[common:])
        self.engine.block_manager.free_tail(shadow)
        return shadow

    def _schedule(self, shadows: dict[int, Sequence], active: list[int]) -> list[tuple[int, ScheduledSeq]]:
        """Each active shadow computes its uncached tokens; one without KV blocks to spare stops drafting."""
        manager, items = self.engine.block_manager, []
        for i in active:
            shadow = shadows[i]
            if shadow.num_uncached_tokens == 0 or not manager.can_allocate(shadow, len(shadow)):
                continue
            manager.allocate(shadow, len(shadow))
            items.append((i, ScheduledSeq(shadow, shadow.num_uncached_tokens)))
        return items

    def _pick(self, seq: Sequence, shadow: Sequence, logits: np.ndarray) -> tuple[int, np.ndarray | None]:
        """The draft token and, when sampling, the distribution q it was drawn from (same filters as the
        target's sampler, so q is as close to p as the draft model allows)."""
        params = seq.params
        if params.is_greedy:
            return greedy_token(logits, params, shadow.token_ids, seq.num_prompt_tokens), None
        q = sampling_probs(logits, params, shadow.token_ids, seq.num_prompt_tokens)
        rng = self._rngs.setdefault(seq.seq_id, draft_rng(params.seed))
        return int(rng.choice(q.size, p=q)), q

    def release(self, seq: Sequence) -> None:
        shadow = self.shadows.pop(seq.seq_id, None)
        if shadow is not None:
            self.engine.block_manager.deallocate(shadow)
        self._rngs.pop(seq.seq_id, None)


def draft_rng(seed: int | None) -> np.random.Generator:
    """The drafter's own random stream. Seeded like the verifier's (default_rng(seed)) it would draw the same
    uniforms, so a draft token and its acceptance test would be correlated and the output biased."""
    return np.random.default_rng(None if seed is None else [seed, DRAFT_STREAM_ID])


def _common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n
