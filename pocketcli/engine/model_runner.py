"""Flattens a scheduled batch into model inputs, runs the model, and returns logits of sampling positions."""
from __future__ import annotations

import numpy as np

from ..models.attn_metadata import AttnMetadata
from ..models.base import DecoderModel
from .graphed_decode import GraphedDecode
from .kv_cache import KVCache
from .scheduler import ScheduledBatch


class NaNLogitsError(ValueError):
    """The model computed NaN logits: no token can be drawn from them (the CLI's one-line error, exit 2)."""


def check_logits(logits: np.ndarray) -> np.ndarray:
    """`logits`, unless one is NaN: a sampler would silently turn NaN into some token (argmax picks the first
    NaN). One max over the rows: ~0.03 ms for a 262k vocabulary."""
    if logits.size and np.isnan(logits.max()):
        raise NaNLogitsError("the model computed NaN logits: its weights hold NaN (e.g. FP8 E4M3 codes 0x7f/0xff) "
                             "or its activations overflowed; no token can be sampled")
    return logits


class ModelRunner:
    def __init__(self, model: DecoderModel, kv_cache: KVCache, graphed_decode: GraphedDecode | None = None):
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.last_hidden: np.ndarray | None = None
        self.graphed_decode = graphed_decode  # a CUDA backend's captured decode step, for device logits

    def run(self, batch: ScheduledBatch, first_logit_token: int | None = None,
            keep_logits_on_device: bool = False) -> np.ndarray:
        """Returns logits [num_sampling_seqs, vocab_size], one row per item whose `samples_token` is true,
        or, given first_logit_token, one row per flat batch token from that index on (scoring, verification);
        keep_logits_on_device: a device backend's logits are returned where they are (DeviceSampler)."""
        token_ids, positions, attn, logits_indices = self.prepare_inputs(batch)
        if keep_logits_on_device and first_logit_token is None and self.graphed_decode is not None \
                and self.graphed_decode.accepts(batch):
            logits = self.graphed_decode.run(token_ids, positions, attn)
            if logits is not None:
                self.last_hidden = None  # not kept by the graph (no drafter reads it: none runs with device logits)
                return logits
        if first_logit_token is not None:
            logits_indices = list(range(first_logit_token, len(token_ids)))
        hidden = self.model.forward(token_ids, positions, attn, self.kv_cache.keys, self.kv_cache.values)
        self.last_hidden = hidden  # [num_tokens, D]: read by drafters that need target hidden states
        if not logits_indices:
            return np.empty((0, self.model.hparams.vocab_size), dtype=np.float32)
        if keep_logits_on_device:
            return self.model.compute_logits(hidden[logits_indices], keep_on_device=True)
        return check_logits(self.model.compute_logits(hidden[logits_indices]))

    def prepare_inputs(self, batch: ScheduledBatch):
        token_ids, positions, slots, context_lens, starts, logits_indices = [], [], [], [], [0], []
        for item in batch.items:
            seq, start = item.seq, item.seq.num_cached_tokens
            end = start + item.num_new_tokens
            token_ids.extend(seq.token_ids[start:end])
            seq_positions = np.arange(start, end, dtype=np.int64)
            positions.append(seq_positions)
            table = np.asarray(seq.block_table, dtype=np.int64)
            slots.append(table[seq_positions // self.block_size] * self.block_size + seq_positions % self.block_size)
            context_lens.append(end)
            starts.append(starts[-1] + item.num_new_tokens)
            if item.samples_token:  # one row, or one per draft token plus one (speculative verification)
                logits_indices.extend(range(starts[-1] - 1 - item.num_draft_tokens, starts[-1]))
        attn = AttnMetadata(
            slot_mapping=np.concatenate(slots),
            block_tables=self._block_tables(batch),
            context_lens=np.asarray(context_lens, dtype=np.int32),
            query_start_loc=np.asarray(starts, dtype=np.int32),
        )
        if self.kv_cache.recurrent is not None:  # hybrid models: each sequence's recurrent-state slot
            attn.recurrent_state = self.kv_cache.recurrent
            attn.state_slots = np.asarray([self.kv_cache.recurrent.slot_of(item.seq.seq_id) for item in batch.items])
            attn.records_states = np.asarray([getattr(item, "num_draft_tokens", 0) > 0 for item in batch.items])
        return np.asarray(token_ids, dtype=np.int64), np.concatenate(positions), attn, logits_indices

    @staticmethod
    def _block_tables(batch: ScheduledBatch) -> np.ndarray:
        max_blocks = max(len(item.seq.block_table) for item in batch.items)
        tables = np.full((len(batch.items), max_blocks), -1, dtype=np.int32)
        for row, item in enumerate(batch.items):
            tables[row, :len(item.seq.block_table)] = item.seq.block_table
        return tables
