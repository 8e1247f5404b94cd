"""Collectives between rank processes on one machine, through a shared-memory segment and a barrier.

The segment holds two sets of per-rank slots. A collective writes this rank's slot of the current set, waits at
the barrier, reads every rank's slot, and flips to the other set: a rank can only write a set again after the
next barrier, which every rank reaches only once it has read that set, so one barrier per collective is enough.
Messages bigger than a slot go through in slot-sized chunks. Every rank adds the slots in rank order, so all
ranks get bit-identical sums.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from .rank_barrier import RankBarrier

DEFAULT_SLOT_BYTES = 4 << 20
_HEADER = np.dtype("<u8")  # the byte length of a broadcast object, in front of its pickle


@dataclass(frozen=True)
class ShmGroupHandle:
    """What a rank process needs to join the group (picklable into a multiprocessing.Process)."""
    segment_name: str
    world_size: int
    slot_bytes: int
    barrier: RankBarrier


def create_shm_group(context, world_size: int,
                     slot_bytes: int = DEFAULT_SLOT_BYTES) -> tuple[shared_memory.SharedMemory, ShmGroupHandle]:
    """The segment (owned by the caller, who unlinks it) and the handle every rank attaches with."""
    segment = shared_memory.SharedMemory(create=True, size=2 * world_size * slot_bytes)
    return segment, ShmGroupHandle(segment.name, world_size, slot_bytes, RankBarrier(context, world_size))


def attach_segment(handle: ShmGroupHandle) -> shared_memory.SharedMemory:
    """Open the group's segment in a rank process; the creator alone unlinks it. (Rank processes share the
    creator's resource tracker, so the registration this adds on Python < 3.13 is the creator's one.)"""
    return shared_memory.SharedMemory(name=handle.segment_name)


class ShmCommunicator:
    def __init__(self, handle: ShmGroupHandle, rank: int, segment: shared_memory.SharedMemory):
        self.rank, self.world_size = rank, handle.world_size
        self._barrier, self.slot_bytes = handle.barrier, handle.slot_bytes
        self.segment = segment  # kept open for the communicator's life: `slots` is a view of it
        self.slots = np.ndarray((2, self.world_size, self.slot_bytes), dtype=np.uint8, buffer=segment.buf)
        self.parity = 0

    # --- the interface shared with NcclCommunicator -----------------------------------------------------------
    def all_reduce(self, x: np.ndarray) -> np.ndarray:
        """The element-wise sum of every rank's x (same shape and dtype on every rank)."""
        flat = np.ascontiguousarray(x).reshape(-1)
        total = np.empty_like(flat)
        for start, stop, parts in self._chunks(flat):
            np.sum(parts, axis=0, out=total[start:stop])  # parts: [ranks, chunk], summed in rank order
        return total.reshape(x.shape)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        """[world_size, *x.shape]: every rank's x, in rank order."""
        flat = np.ascontiguousarray(x).reshape(-1)
        gathered = np.empty((self.world_size, flat.size), dtype=flat.dtype)
        for start, stop, parts in self._chunks(flat):
            gathered[:, start:stop] = parts
        return gathered.reshape((self.world_size,) + x.shape)

    def broadcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Root's x on every rank; the others pass a buffer of the same shape and dtype."""
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        for start, stop, parts in self._chunks(flat, writers=(root,)):
            out[start:stop] = parts[root]
        return out.reshape(x.shape)

    def barrier(self) -> None:
        self._wait()

    # --- beyond NCCL: python objects, for the step inputs rank 0 sends -----------------------------------------
    def broadcast_object(self, obj: Any = None, root: int = 0) -> Any:
        payload = np.frombuffer(pickle.dumps(obj, protocol=5), dtype=np.uint8) if self.rank == root else None
        length = self.broadcast(np.array([0 if payload is None else payload.size], dtype=_HEADER), root)[0]
        buffer = payload if payload is not None else np.empty(int(length), dtype=np.uint8)
        return pickle.loads(self.broadcast(buffer, root).tobytes())

    def abort(self) -> None:
        """Break the barrier: every rank waiting in (or entering) a collective gets RankStopped."""
        self._barrier.abort()

    def close(self) -> None:
        self.slots = None
        self.segment.close()

    # --- one round per slot-sized chunk --------------------------------------------------------------------
    def _chunks(self, flat: np.ndarray, writers: tuple[int, ...] | None = None):
        """Yield (start, stop, parts) per chunk of flat; parts [ranks, stop - start] views the ranks' slots."""
        per_chunk = self.slot_bytes // flat.dtype.itemsize
        for start in range(0, flat.size, per_chunk):
            stop = min(start + per_chunk, flat.size)
            slots = self.slots[self.parity]
            if writers is None or self.rank in writers:
                slots[self.rank, :(stop - start) * flat.dtype.itemsize] = flat[start:stop].view(np.uint8)
            self._wait()
            self.parity ^= 1
            yield start, stop, slots[:, :(stop - start) * flat.dtype.itemsize].view(flat.dtype)

    def _wait(self) -> None:
        self._barrier.wait(self.rank)
