"""Where each token of a flat batch lives in the paged KV cache: what the model's attention needs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class AttnMetadata:
    slot_mapping: np.ndarray  # int64 [num_tokens]: cache slot (block_id * block_size + offset) per new token
    block_tables: np.ndarray  # int32 [num_seqs, max_blocks_per_seq], padded with -1
    context_lens: np.ndarray  # int32 [num_seqs]: cached tokens per sequence after this step
    query_start_loc: np.ndarray  # int32 [num_seqs + 1]: the new tokens of seq s are [start[s], start[s+1])
    # hybrid models (Gated DeltaNet): the engine's RecurrentStatePool and each sequence's slot in it
    recurrent_state: Any = None
    state_slots: np.ndarray | None = None  # int64 [num_seqs]
    records_states: np.ndarray | None = None  # bool [num_seqs]: speculative verification, keep rollback records

    @property
    def num_seqs(self) -> int:
        return len(self.context_lens)
