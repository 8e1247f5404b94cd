"""Rank 0's side of a tensor-parallel group: its own shard model, the rank processes 1..n-1, and their shutdown.

The plan is made (and a shape that cannot split refused) before any process starts or any weight loads. Ranks
share one shared-memory segment; it is unlinked as soon as every rank has attached, so nothing is left in
/dev/shm however the processes end. A rank that fails or dies breaks the barrier; rank 0 then raises one
TensorParallelError naming it. Closing (explicit, at garbage collection, or at interpreter exit, before
multiprocessing terminates its daemons) breaks the barrier, joins the ranks, and kills any that do not leave.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import sys
import threading
from contextlib import contextmanager
from typing import Any

from gguf_loader.hparams import ModelHParams

from ..config import EngineConfig
from .errors import TensorParallelError
from .forward_step import KVCacheShape
from .parallel_runner import TensorParallelRunner
from .rank_barrier import RankStopped
from .rank_model import make_rank_model
from .rank_worker import RankSpec, run_rank
from .shard_plan import make_shard_plan
from .shm_communicator import ShmCommunicator, create_shm_group

JOIN_SECONDS = 5.0  # a rank that has not left this long after the barrier broke is terminated


def process_context():
    """forkserver: ranks fork from a bare single-threaded server process (forking this one, with numba's thread
    pool and server threads running, is unsafe). The server preloads nothing: importing the kernels starts
    numba's OpenMP pool, and a child forked from a process with that pool is killed at its first parallel loop.
    A frozen binary has only spawn."""
    if getattr(sys, "frozen", False):
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([])
    return context


class RankGroup:
    def __init__(self, model_file: Any, hparams: ModelHParams, config: EngineConfig, ops: Any):
        self.plan = make_shard_plan(model_file, hparams, config.tp_size)  # before anything starts or loads
        self.model_file, self.config = model_file, config
        self.processes = RankProcesses(self.plan, config, process_context())
        try:
            data_comm = self.processes.make_data_comm(config)
            self.model = make_rank_model(model_file, hparams, self.plan, 0, ops, data_comm)
            self.processes.await_ready()
        except BaseException:
            self.processes.close()
            raise
        self._finalizer = multiprocessing.util.Finalize(self, self.processes.close, exitpriority=10)

    @property
    def tp_size(self) -> int:
        return self.plan.tp_size

    def make_runner(self, kv_cache) -> TensorParallelRunner:
        self.send(KVCacheShape(kv_cache.num_blocks, kv_cache.block_size, kv_cache.kv_type))
        return TensorParallelRunner(self.model, kv_cache, self)

    def send(self, message: Any) -> None:
        """Broadcast a step (or the cache shape) from rank 0 to every rank."""
        with self.collective():
            self.processes.control.broadcast_object(message, root=0)

    @contextmanager
    def collective(self):
        """Collective calls inside raise one TensorParallelError naming the rank that failed."""
        try:
            yield
        except RankStopped:
            raise TensorParallelError(self.processes.failure_message()) from None

    def rank_weight_bytes(self) -> list[int]:
        return [self.plan.rank_weight_bytes(self.model_file, rank) for rank in range(self.tp_size)]

    @property
    def collective_seconds(self) -> float:
        return self.model.ops.collective_seconds

    def close(self) -> None:
        self._finalizer()


class RankProcesses:
    """The rank processes 1..n-1, the shared-memory communicator, and what to do when one of them fails."""

    def __init__(self, plan, config: EngineConfig, context):
        import numba

        world_size = plan.tp_size
        threads = max(1, numba.get_num_threads() // world_size)
        spec = RankSpec(config.model_path, config.backend, threads, config.devices or tuple(range(world_size)))
        self.segment, handle = create_shm_group(context, world_size)
        self.segment_linked, self.closed = True, False
        self.control = ShmCommunicator(handle, 0, self.segment)
        self.status, self.workers = [], []
        self.threads, self.backend = threads, config.backend
        self.failure: str | None = None
        try:
            for rank in range(1, world_size):
                self._start_rank(context, spec, plan, handle, rank)
        except BaseException:
            self.close()
            raise

    def _start_rank(self, context, spec: RankSpec, plan, handle, rank: int) -> None:
        reader, writer = context.Pipe(duplex=False)
        worker = context.Process(target=run_rank, args=(spec, plan, handle, rank, writer), daemon=True,
                                 name=f"pocket-tp-rank{rank}")
        worker.start()
        writer.close()
        self.status.append(reader)
        self.workers.append(worker)

    def keep_cpu_threads(self) -> None:
        """Rank 0's share of the cores, in the thread that steps the engine (numba's setting is per thread)."""
        if self.backend != "cuda":
            import numba

            if numba.get_num_threads() != self.threads:
                numba.set_num_threads(self.threads)

    def make_data_comm(self, config: EngineConfig):
        """The communicator for activations: shared memory on the CPU, NCCL between GPUs."""
        if config.backend != "cuda":
            return self.control
        from numba import cuda

        from .nccl_communicator import NcclCommunicator, make_unique_id

        cuda.select_device((config.devices or (0,))[0])
        unique_id = make_unique_id()
        self.control.broadcast_object(unique_id, root=0)
        return NcclCommunicator(len(self.workers) + 1, 0, unique_id)

    def await_ready(self) -> None:
        """Wait until every rank has loaded its shards; a rank that fails to load raises its error here."""
        for rank, (reader, worker) in enumerate(zip(self.status, self.workers), start=1):
            multiprocessing.connection.wait([reader, worker.sentinel])
            message = self._receive(reader) or ("error", self._exit_note(rank, worker))
            if message[0] != "ready":
                raise TensorParallelError(message[1])
        self.segment.unlink()  # every rank has it mapped: nothing can leak from here on
        self.segment_linked = False
        threading.Thread(target=self._watch, name="pocket-tp-watchdog", daemon=True).start()

    def failure_message(self) -> str:
        """Why the barrier broke: a rank's own error message, else its exit code."""
        for reader in self.status:
            message = self._receive(reader, wait_seconds=0.5)
            if message is not None and message[0] == "error":
                return message[1]
        for rank, worker in enumerate(self.workers, start=1):
            worker.join(0.5)
            if worker.exitcode not in (None, 0):
                return self._exit_note(rank, worker)
        return self.failure or "a tensor-parallel rank stopped"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.control.abort()  # idle ranks wait in a broadcast: the broken barrier sends them home
        for worker in self.workers:
            worker.join(JOIN_SECONDS)
            if worker.is_alive():
                worker.kill()
                worker.join()
        self.control.close()
        if self.segment_linked:
            self.segment.unlink()

    def _watch(self) -> None:
        """A rank that dies without a word (killed, out of memory) must not leave rank 0 waiting forever."""
        pending = {worker.sentinel: (rank, worker) for rank, worker in enumerate(self.workers, start=1)}
        while pending and not self.closed:
            for sentinel in multiprocessing.connection.wait(list(pending)):
                rank, worker = pending.pop(sentinel)
                if not self.closed:
                    self.failure = self._exit_note(rank, worker)
                    self.control.abort()

    @staticmethod
    def _receive(reader, wait_seconds: float = 0.0) -> tuple[str, object] | None:
        """A rank's status message, or None when it sent none (a closed pipe: the rank died)."""
        try:
            return reader.recv() if reader.poll(wait_seconds) else None
        except (EOFError, OSError):
            return None

    @staticmethod
    def _exit_note(rank: int, worker) -> str:
        worker.join(1.0)
        return f"tensor-parallel rank {rank} exited (code {worker.exitcode}) before finishing"
