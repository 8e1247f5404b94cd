"""What rank 0 sends every rank each step (the flat model inputs), and the forward every rank runs on them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.kv_cache import KVCache
from ..models.attn_metadata import AttnMetadata
from ..models.base import DecoderModel


@dataclass(frozen=True)
class KVCacheShape:
    """Sent once, when rank 0 has sized its cache: every rank allocates the same blocks for its own KV heads."""
    num_blocks: int
    block_size: int
    kv_type: str = "f32"


@dataclass(frozen=True)
class ForwardStep:
    token_ids: np.ndarray  # int64 [T]
    positions: np.ndarray  # int64 [T]
    attn: AttnMetadata  # slots, block tables, context lengths: rank 0's scheduler decided them
    logits_indices: list[int]  # flat token rows that need logits (the LM head gather is collective)


def run_forward_step(model: DecoderModel, kv_cache: KVCache, step: ForwardStep) -> tuple[np.ndarray, np.ndarray]:
    """hidden [T, D] and logits [len(logits_indices), vocab]; every rank makes the same collective calls."""
    hidden = model.forward(step.token_ids, step.positions, step.attn, kv_cache.keys, kv_cache.values)
    if not step.logits_indices:
        return hidden, np.empty((0, model.hparams.vocab_size), dtype=np.float32)
    return hidden, model.compute_logits(hidden[step.logits_indices])
