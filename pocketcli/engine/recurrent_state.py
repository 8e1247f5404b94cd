"""Per-sequence recurrent state (Gated DeltaNet conv + delta-rule states) beside the paged KV cache.

A fixed pool of slots, one per running sequence: a slot is taken with the sequence's first KV blocks (zeroed, so
a preempted sequence recomputes from a clean state) and given back with them (RecurrentBlockManager). A hybrid
model cannot reuse a cached KV prefix without the matching recurrent state, so prefix caching is off for it.
Speculative decoding: a verification forward records, per Gated DeltaNet layer, the slot's states before it
and the recurrence inputs of the verified tokens (models/qwen3_next.py VerifyRecord); `rollback` recomputes
the states of the accepted tokens only (MLX DFlash's approach: no second model forward), and runs from
RecurrentBlockManager.free_tail, where the speculative decoder gives back rejected drafts' blocks.
`snapshot`/`restore` copy a slot. The states, snapshots and records live where the backend computes (numpy
arrays on the host, device arrays on cuda): the pool moves them with the backend's array ops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .block_manager import BlockManager
from .sequence import Sequence


@dataclass(frozen=True)
class RecurrentSnapshot:
    conv: dict[int, np.ndarray]  # layer id -> conv state [K-1, C]
    ssm: dict[int, np.ndarray]  # layer id -> delta-rule state [H_v, d_k, d_v]


class RecurrentStatePool:
    def __init__(self, num_slots: int, shapes: dict[int, tuple[tuple[int, ...], tuple[int, ...]]], ops=None):
        """shapes: layer id -> (conv state shape, delta-rule state shape) of one sequence; ops: the kernels
        `rollback` recomputes with (kernels_numba reference when None)."""
        self.num_slots = num_slots
        self.ops = ops
        self.arrays = self._ops()  # zeros, copy_array, assign...: the states live where the kernels compute
        self.records: dict[int, dict[int, Any]] = {}  # slot -> layer id -> its last verification
        zeros = self.arrays.zeros
        self.conv = {layer: zeros((num_slots, *conv), np.float32) for layer, (conv, _) in shapes.items()}
        self.ssm = {layer: zeros((num_slots, *ssm), np.float32) for layer, (_, ssm) in shapes.items()}
        self.free_slots: list[int] = list(range(num_slots))[::-1]  # a stack: freed slots are reused first
        self.slot_of_seq: dict[int, int] = {}

    @property
    def num_free_slots(self) -> int:
        return len(self.free_slots)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.conv.values()) + sum(a.nbytes for a in self.ssm.values())

    def has_slot(self, seq_id: int) -> bool:
        return seq_id in self.slot_of_seq

    def can_allocate(self) -> bool:
        return bool(self.free_slots)

    def allocate(self, seq_id: int) -> int:
        """A zeroed slot for the sequence (ask can_allocate first)."""
        slot = self.free_slots.pop()
        self.slot_of_seq[seq_id] = slot
        self.reset(slot)
        return slot

    def free(self, seq_id: int) -> None:
        slot = self.slot_of_seq.pop(seq_id, None)
        if slot is not None:
            self.free_slots.append(slot)
            self.records.pop(slot, None)

    def slot_of(self, seq_id: int) -> int:
        return self.slot_of_seq[seq_id]

    def reset(self, slot: int) -> None:
        for states in (self.conv, self.ssm):
            for array in states.values():
                self.arrays.fill_zeros(array[slot])

    def layer_states(self, layer_id: int, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Views of one slot's (conv state, delta-rule state) of a layer: the kernels update them in place."""
        return self.conv[layer_id][slot], self.ssm[layer_id][slot]

    # --- speculative decoding: roll back to the last accepted token ------------------------------------------
    def snapshot(self, seq_id: int) -> RecurrentSnapshot:
        slot, copy = self.slot_of(seq_id), self.arrays.copy_array
        return RecurrentSnapshot({layer: copy(a[slot]) for layer, a in self.conv.items()},
                                 {layer: copy(a[slot]) for layer, a in self.ssm.items()})

    def restore(self, seq_id: int, snapshot: RecurrentSnapshot) -> None:
        slot = self.slot_of(seq_id)
        for layer, state in snapshot.conv.items():
            self.arrays.assign(self.conv[layer][slot], state)
        for layer, state in snapshot.ssm.items():
            self.arrays.assign(self.ssm[layer][slot], state)

    def record(self, layer_id: int, slot: int, record: Any) -> None:
        """Keep (or, given None, drop) the slot's verification record of a layer; the model calls this."""
        if record is None:
            self.records.get(slot, {}).pop(layer_id, None)
        else:
            self.records.setdefault(slot, {})[layer_id] = record

    def rollback(self, seq_id: int, num_computed_tokens: int) -> None:
        """After verification: make the slot's states those after token num_computed_tokens - 1 (the last
        accepted one), recomputed from the recorded states and inputs. No record: nothing to undo."""
        slot = self.slot_of_seq.get(seq_id)
        records = self.records.pop(slot, None) if slot is not None else None
        for layer_id, rec in (records or {}).items():
            keep = num_computed_tokens - rec.first_position
            if not 0 <= keep < rec.q.shape[0]:  # everything accepted (or nothing to do): the state is right
                continue
            history = self.arrays.concat_rows([rec.conv_before, rec.conv_inputs[:keep]])
            self.arrays.assign(self.conv[layer_id][slot], history[history.shape[0] - rec.conv_before.shape[0]:])
            ssm = self.ssm[layer_id][slot]
            self.arrays.assign(ssm, rec.ssm_before)
            if keep:
                self._ops().gated_delta_rule_recurrent(rec.q[:keep], rec.k[:keep], rec.v[:keep], rec.g[:keep],
                                                       rec.beta[:keep], ssm)

    def _ops(self):
        if self.ops is None:
            from kernels_numba import get_ops
            self.ops = get_ops("reference")
        return self.ops


class RecurrentBlockManager(BlockManager):
    """KV blocks plus one recurrent-state slot per sequence, taken and given back together; no prefix cache."""

    def __init__(self, num_blocks: int, block_size: int, pool: RecurrentStatePool):
        super().__init__(num_blocks, block_size, enable_prefix_caching=False)
        self.recurrent_state = pool

    def can_allocate(self, seq: Sequence, num_tokens: int, cached_block_ids: list[int] = ()) -> bool:
        needs_slot = not self.recurrent_state.has_slot(seq.seq_id)
        return super().can_allocate(seq, num_tokens, cached_block_ids) and (
            not needs_slot or self.recurrent_state.can_allocate())

    def allocate(self, seq: Sequence, num_tokens: int, cached_block_ids: list[int] = ()) -> None:
        if not self.recurrent_state.has_slot(seq.seq_id):
            self.recurrent_state.allocate(seq.seq_id)
        super().allocate(seq, num_tokens, cached_block_ids)

    def deallocate(self, seq: Sequence) -> None:
        super().deallocate(seq)
        self.recurrent_state.free(seq.seq_id)

    def free_tail(self, seq: Sequence) -> int:
        """Speculative rollback: the recurrent state follows the KV back to the last accepted token."""
        self.recurrent_state.rollback(seq.seq_id, seq.num_cached_tokens)
        free_tail = getattr(super(), "free_tail", None)
        return free_tail(seq) if free_tail else 0


def make_recurrent_state(model, num_slots: int) -> RecurrentStatePool | None:
    """A pool for a model with recurrent layers (`recurrent_state_shapes()`), else None."""
    shapes_of = getattr(model, "recurrent_state_shapes", None)
    shapes = shapes_of() if shapes_of else {}
    return RecurrentStatePool(num_slots, shapes, getattr(model, "ops", None)) if shapes else None
