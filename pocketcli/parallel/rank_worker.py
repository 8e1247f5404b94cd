"""A rank process (ranks 1..n-1): loads its shards, then runs each step rank 0 broadcasts until told to stop.

It ignores Ctrl-C (the terminal sends it to every process of the group; rank 0 decides), leaves when rank 0 breaks
the barrier or sends None, and exits at once if rank 0's process dies.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from .forward_step import KVCacheShape, run_forward_step
from .rank_barrier import RankStopped
from .shard_plan import ShardPlan
from .shm_communicator import ShmCommunicator, ShmGroupHandle, attach_segment


@dataclass(frozen=True)
class RankSpec:
    model_path: str
    backend: str  # kernels_numba backend: cpu, reference or cuda
    num_threads: int  # numba threads of this rank (the cores shared out among ranks)
    device_ids: tuple[int, ...] = ()  # CUDA ordinal of each rank (cuda backend)


def run_rank(spec: RankSpec, plan: ShardPlan, handle: ShmGroupHandle, rank: int, status) -> None:
    """The process target; `status` (a Connection) gets ("ready", rank) once loaded, or ("error", message)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # numba makes a multiprocessing lock when it starts its threads: with the default context back at fork it
    # is anonymous, so a rank killed with SIGKILL leaves no named semaphore behind (this process starts none)
    multiprocessing.set_start_method("fork", force=True)
    control = ShmCommunicator(handle, rank, attach_segment(handle))
    _exit_with_parent(control)
    exit_code = 0
    try:
        model = _load_rank(spec, plan, rank, control)
        status.send(("ready", rank))
        _follow_rank0(model, control)
    except RankStopped:
        pass  # rank 0 closed the group (or another rank failed: rank 0 reports it)
    except BaseException as exc:  # told to rank 0, which raises it as a one-line error
        status.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        control.abort()
        exit_code = 1
    finally:
        control.close()
    sys.exit(exit_code)


def _load_rank(spec: RankSpec, plan: ShardPlan, rank: int, control: ShmCommunicator) -> Any:
    from kernels_numba import get_ops

    from ..model_source import open_model_file
    from .rank_model import make_rank_model

    data_comm = control
    if spec.backend == "cuda":
        from numba import cuda

        from .nccl_communicator import NcclCommunicator

        cuda.select_device(spec.device_ids[rank])
        data_comm = NcclCommunicator(plan.tp_size, rank, control.broadcast_object(None, root=0))
    else:
        import numba

        numba.set_num_threads(min(spec.num_threads, numba.config.NUMBA_NUM_THREADS))
    return make_rank_model(open_model_file(spec.model_path), plan.hparams, plan, rank, get_ops(spec.backend),
                           data_comm)


def _follow_rank0(model, control: ShmCommunicator) -> None:
    from ..engine.kv_cache import make_kv_cache

    kv_cache, hp = None, model.hparams
    while True:
        message = control.broadcast_object(None, root=0)
        if message is None:
            return
        if isinstance(message, KVCacheShape):
            kv_cache = make_kv_cache(hp.num_layers, message.num_blocks, message.block_size, hp.num_kv_heads,
                                     hp.head_dim, zeros=model.ops.zeros, kv_type=message.kv_type)
        else:
            run_forward_step(model, kv_cache, message)


def _exit_with_parent(control: ShmCommunicator) -> None:
    """If rank 0's process dies (even by SIGKILL), break the barrier for the other ranks and exit."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        control.abort()
        os._exit(1)

    threading.Thread(target=watch, name="pocket-tp-parent-watch", daemon=True).start()
