"""Which tokens of a forward the fused decode layer takes, and the attention metadata of the others.

A serve step mixes the decode tokens of the running sequences with the prompt chunk of a newly admitted one.
Each decode token (the next token of its own sequence: one query at its last position, with a cache slot) runs
through the backend's one-call decode layer; the other tokens (prompt chunks, speculative verifies) run op by op
on their own metadata. The two groups share no sequence, so a layer can run them one after the other; the LM head
still reads its weights once for all of them. A decode token then gets the same numbers whether or not a prompt
shares its step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attn_metadata import AttnMetadata


@dataclass(frozen=True)
class DecodeSplit:
    decode_tokens: np.ndarray  # int64 [d]: flat indices of the decode tokens
    block_tables: np.ndarray  # int32 [d, max_blocks]: their sequences' block tables
    positions: np.ndarray  # int64 [d]
    slots: np.ndarray  # int64 [d]: their cache slots
    rest_tokens: np.ndarray  # int64 [r]: flat indices of the other tokens (r may be 0)
    rest_positions: np.ndarray  # int64 [r]
    rest_attn: AttnMetadata | None  # the other tokens' sequences (None when r == 0)


def split_decodes(positions: np.ndarray, attn: AttnMetadata, max_decodes: int) -> DecodeSplit | None:
    """The first max_decodes decode tokens against the rest, or None when there is no decode token (or the batch
    carries recurrent state: hybrid layers run whole batches)."""
    if attn.recurrent_state is not None or max_decodes < 1:
        return None
    starts = np.asarray(attn.query_start_loc, dtype=np.int64)
    num_queries = np.diff(starts)
    first_tokens = starts[:-1]
    is_decode = num_queries == 1
    # the fused layer attends over positions + 1 keys: a one-token sequence is a decode only when that is its
    # context, and it has a cache slot
    candidates = first_tokens[is_decode]
    is_decode[is_decode] = ((np.asarray(attn.slot_mapping)[candidates] >= 0)
                            & (np.asarray(attn.context_lens)[is_decode] == np.asarray(positions)[candidates] + 1))
    decode_seqs = np.flatnonzero(is_decode)[:max_decodes]
    if decode_seqs.size == 0:
        return None
    rest_seqs = np.setdiff1d(np.arange(attn.num_seqs), decode_seqs)
    decode_tokens = first_tokens[decode_seqs]
    rest_tokens = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in rest_seqs]).astype(np.int64) \
        if rest_seqs.size else np.empty(0, dtype=np.int64)
    return DecodeSplit(
        decode_tokens, np.ascontiguousarray(attn.block_tables[decode_seqs], dtype=np.int32),
        np.ascontiguousarray(positions[decode_tokens], dtype=np.int64),
        np.ascontiguousarray(np.asarray(attn.slot_mapping)[decode_tokens], dtype=np.int64),
        rest_tokens, np.asarray(positions)[rest_tokens], _rest_attn(attn, rest_seqs, rest_tokens, num_queries))


def _rest_attn(attn: AttnMetadata, rest_seqs: np.ndarray, rest_tokens: np.ndarray,
               num_queries: np.ndarray) -> AttnMetadata | None:
    if rest_seqs.size == 0:
        return None
    query_start_loc = np.concatenate([[0], np.cumsum(num_queries[rest_seqs])]).astype(np.int32)
    return AttnMetadata(slot_mapping=np.asarray(attn.slot_mapping)[rest_tokens],
                        block_tables=attn.block_tables[rest_seqs], context_lens=attn.context_lens[rest_seqs],
                        query_start_loc=query_start_loc)
