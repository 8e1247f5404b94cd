"""The shared-memory communicator between real rank processes: results against numpy, chunking, abort."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from pocketcli.parallel.rank_group import process_context
from pocketcli.parallel.rank_barrier import RankStopped
from pocketcli.parallel.shm_communicator import ShmCommunicator, attach_segment, create_shm_group

SLOT_BYTES = 256  # tiny slots: every message below takes several chunks


def rank_data(rank: int) -> dict:
    rng = np.random.default_rng(rank)
    return {"reduce": rng.standard_normal((7, 33)).astype(np.float32),  # 924 bytes: 4 chunks of 256
            "gather": rng.integers(0, 100, size=(3, 50)).astype(np.int64),
            "object": {"rank": rank, "ids": list(range(rank * 100))}}


def collectives(comm: ShmCommunicator) -> dict:
    """The same sequence of collectives on every rank (rank 0 runs it in the test process)."""
    mine = rank_data(comm.rank)
    shape = mine["gather"].shape
    return {"reduce": comm.all_reduce(mine["reduce"]), "gather": comm.all_gather(mine["gather"]),
            "broadcast": comm.broadcast(mine["gather"] if comm.rank == 1 else np.zeros(shape, np.int64), root=1),
            "object": comm.broadcast_object(mine["object"] if comm.rank == 0 else None, root=0),
            "barrier": comm.barrier()}


def worker(handle, rank, results):
    comm = ShmCommunicator(handle, rank, attach_segment(handle))
    try:
        results.put((rank, collectives(comm)))
        comm.barrier()  # rank 0 aborts here in the abort test: this rank must see RankStopped
    except RankStopped:
        results.put((rank, "stopped"))
    finally:
        comm.close()


def start_group(world_size: int):
    context = process_context()
    segment, handle = create_shm_group(context, world_size, SLOT_BYTES)
    results = context.SimpleQueue()
    workers = [context.Process(target=worker, args=(handle, rank, results)) for rank in range(1, world_size)]
    for w in workers:
        w.start()
    return segment, handle, results, workers


@pytest.mark.parametrize("world_size", [2, 4])
def test_collectives_match_numpy_on_every_rank(world_size):
    segment, handle, results, workers = start_group(world_size)
    comm = ShmCommunicator(handle, 0, segment)
    try:
        outcomes = {0: collectives(comm)}
        comm.barrier()
        for _ in workers:
            rank, outcome = results.get()
            outcomes[rank] = outcome
    finally:
        for w in workers:
            w.join(10)
        comm.close()
        segment.unlink()
    data = [rank_data(r) for r in range(world_size)]
    expected_sum = data[0]["reduce"].copy()
    for d in data[1:]:
        expected_sum += d["reduce"]  # in rank order, as the communicator adds
    for rank in range(world_size):
        np.testing.assert_array_equal(outcomes[rank]["reduce"], expected_sum)
        np.testing.assert_array_equal(outcomes[rank]["gather"], np.stack([d["gather"] for d in data]))
        np.testing.assert_array_equal(outcomes[rank]["broadcast"], data[1]["gather"])
        assert outcomes[rank]["object"] == data[0]["object"]
    assert all(w.exitcode == 0 for w in workers)
    assert not os.path.exists(f"/dev/shm/{handle.segment_name}")


def test_abort_releases_every_waiting_rank():
    segment, handle, results, workers = start_group(3)
    comm = ShmCommunicator(handle, 0, segment)
    try:
        collectives(comm)
        finished = [results.get() for _ in workers]  # every worker is through its collectives
        comm.abort()  # ... and now waits in its last barrier
        outcomes = dict(results.get() for _ in workers)
        with pytest.raises(RankStopped):
            comm.barrier()
    finally:
        for w in workers:
            w.join(10)
        comm.close()
        segment.unlink()
    assert sorted(rank for rank, _ in finished) == [1, 2]
    assert sorted(outcomes) == [1, 2] and all(v == "stopped" for v in outcomes.values())
    assert all(w.exitcode == 0 for w in workers)


def idle_worker(handle, rank):
    comm = ShmCommunicator(handle, rank, attach_segment(handle))
    comm.barrier()  # rank 0 never comes: this rank sleeps here until it is killed


def test_a_rank_killed_while_waiting_cannot_wedge_the_others():
    """multiprocessing.Barrier would hang abort() here: its Condition waits for the dead sleeper's wake-up."""
    context = process_context()
    segment, handle = create_shm_group(context, 3, SLOT_BYTES)
    workers = [context.Process(target=idle_worker, args=(handle, rank)) for rank in (1, 2)]
    for w in workers:
        w.start()
    comm = ShmCommunicator(handle, 0, segment)
    try:
        time.sleep(1.0)  # both are asleep in the barrier by now
        workers[0].kill()
        workers[0].join(10)
        comm.abort()  # returns at once, and wakes rank 2
        workers[1].join(10)
        assert workers[1].exitcode == 1  # RankStopped raised in its barrier
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
        comm.close()
        segment.unlink()
