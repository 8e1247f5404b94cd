"""MTP drafting (Qwen3.5 / Qwen3-Next `mtp.*`): the model's own multi-token-prediction block drafts greedily.

Step at position p: logits(t_{p+2}) = head(norm(block(eh_proj([enorm(emb(t_{p+1})), hnorm(H_p)])))), with H_p
the target's post-final-norm hidden state (specdecode_notes 1.3, 1.6); later steps feed the block's own output
back (1.7). The MTP block attends over its own K/V of every verified position, kept per sequence in a private
paged cache (entry p pairs t_{p+1} with H_p at RoPE position p, vLLM's convention). Entries of drafted
positions are overwritten by the next catch-up, which runs from the first position not yet paired with a
verified target hidden state. On a device backend (cuda) that cache, the hidden states and the MTP's logits
stay on the device: only one argmax a step comes back. Wire-up: `make_drafter` returns MTPDrafter(engine).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...models.attn_metadata import AttnMetadata
from ..kv_cache import make_kv_cache
from ..sequence import Sequence
from .drafter import Draft, Drafter


@dataclass
class MTPContext:
    keys: np.ndarray  # [num_blocks, block_size, KVH, key width]: the MTP block's K/V by position (device or host)
    values: np.ndarray  # [..., value width] (width 0: an MLA latent cache, the values read from the keys)
    hidden: np.ndarray  # [num_rows, D]: target hidden states (post final norm) of computed positions
    num_paired: int = 0  # positions 0..num_paired-1 hold K/V from verified (token, hidden) pairs


class MTPDrafter(Drafter):
    def __init__(self, engine, block_size: int = 16):
        self.model = engine.model
        if not getattr(self.model, "mtp_layers", None):
            raise ValueError(f"{engine.model_file.path} has no MTP layers")
        self.mtp = self.model.mtp_layers[0]  # one module, reused for every draft step
        self.max_model_len = engine.max_model_len
        self.block_size = block_size
        self.kv_type = engine.kv_cache.kv_type  # the MTP block's cache: the target's KV type
        self.tap_layer_ids = frozenset({self.model.num_main_layers - 1})
        self.contexts: dict[int, MTPContext] = {}
        # the MTP computes with the target's ops: its cache, hidden states and logits stay where they compute
        self.model.keep_taps_on_device = True  # and so do the target's hidden states

    def _context(self, seq: Sequence) -> MTPContext:
        if seq.seq_id not in self.contexts:
            ops = self.model.ops
            kv_heads, key_dim, value_dim = self.model.kv_cache_layout()  # the target's layout (MLA: a latent)
            cache = make_kv_cache(1, -(-self.max_model_len // self.block_size), self.block_size, kv_heads, key_dim,
                                  zeros=ops.zeros, value_dim=value_dim,
                                  kv_type=self.kv_type)
            self.contexts[seq.seq_id] = MTPContext(cache.keys[0], cache.values[0],
                                                   np.zeros((0, self.model.hparams.hidden_size), np.float32))
        return self.contexts[seq.seq_id]

    def observe(self, seq: Sequence, first_position: int, hidden_by_layer: dict[int, np.ndarray]) -> None:
        """Rows of drafted positions are kept too; only those below seq.num_cached_tokens are ever read."""
        ctx = self._context(seq)
        if first_position > ctx.hidden.shape[0]:
            return  # a gap (never seen positions): propose() drafts nothing for this sequence
        (rows,) = hidden_by_layer.values()
        ops = self.model.ops
        normed = ops.rms_norm(ops.contiguous(rows), self.model.output_norm, self.model.hparams.rms_norm_eps)
        # no zero-row pieces: an empty upload on a device
        ctx.hidden = normed if first_position == 0 else ops.concat_rows([ctx.hidden[:first_position], normed])
        ctx.num_paired = min(ctx.num_paired, first_position)

    def propose(self, seqs: list[Sequence], num_draft_tokens: list[int]) -> list[Draft]:
        return [self._draft(seq, k) for seq, k in zip(seqs, num_draft_tokens)]

    def _draft(self, seq: Sequence, k: int) -> Draft:
        ctx = self.contexts.get(seq.seq_id)
        num_verified = seq.num_cached_tokens  # the last token is not computed yet: H exists for 0..L-2
        if k == 0 or ctx is None or ctx.hidden.shape[0] < num_verified or ctx.num_paired >= num_verified:
            return Draft([])
        k = min(k, self.max_model_len - num_verified)
        first = ctx.num_paired  # catch up: pair every verified H_p with t_{p+1}
        positions = np.arange(first, num_verified)
        token_ids = np.asarray(seq.token_ids[first + 1:num_verified + 1], dtype=np.int64)
        logits, hidden = self._step(ctx, token_ids, ctx.hidden[first:num_verified], positions)
        ctx.num_paired = num_verified
        drafts = [self._greedy_last(logits)]
        for i in range(1, k):  # later steps: the last draft and the MTP's own hidden, one position further
            last = hidden.shape[0] - 1
            logits, hidden = self._step(ctx, np.asarray(drafts[-1:]), hidden[last:],
                                        np.asarray([num_verified - 1 + i]))
            drafts.append(self._greedy_last(logits))
        return Draft(drafts)

    def _greedy_last(self, logits) -> int:
        """The last row's greedy token; on a device its argmax is taken there (one int comes back)."""
        last = logits.shape[0] - 1
        return int(self.model.ops.argmax(logits[last:])[0])

    def _step(self, ctx: MTPContext, token_ids: np.ndarray, hidden: np.ndarray, positions: np.ndarray):
        num_blocks = ctx.keys.shape[0]
        attn = AttnMetadata(slot_mapping=positions.astype(np.int64),
                            block_tables=np.arange(num_blocks, dtype=np.int32)[None, :],
                            context_lens=np.asarray([positions[-1] + 1], dtype=np.int32),
                            query_start_loc=np.asarray([0, len(positions)], dtype=np.int32))
        return self.model.mtp_forward(self.mtp, token_ids, hidden, positions.astype(np.int64), attn,
                                      ctx.keys, ctx.values)

    def release(self, seq: Sequence) -> None:
        self.contexts.pop(seq.seq_id, None)
