"""Collectives between GPUs through NCCL (nccl4py, the `cuda` extra), on device arrays.

Arrays pass to NCCL through `__cuda_array_interface__` (numba device arrays have it) and run on the stream the
CUDA kernels launch on, so a captured decode step records the all-reduces with its kernels. nccl4py is imported
only when a communicator is made: CPU-only installs never load it.
"""
from __future__ import annotations

from typing import Any


def make_unique_id() -> Any:
    """NCCL's group id: made by rank 0, sent to the others (it pickles), passed to every NcclCommunicator."""
    from nccl import core as nccl

    return nccl.get_unique_id()


class NcclCommunicator:
    def __init__(self, world_size: int, rank: int, unique_id: Any):
        from nccl import core as nccl

        self.rank, self.world_size = rank, world_size
        self._nccl = nccl
        self._comm = nccl.Communicator.init(world_size, rank, unique_id)  # collective: every rank calls it

    def all_reduce(self, x):
        """The sum over ranks, in place in x (a device array)."""
        self._comm.allreduce(x, x, self._nccl.SUM, stream=self._stream())
        return x

    def all_gather(self, x):
        """[world_size, *x.shape] device array: every rank's x, in rank order."""
        from numba import cuda

        gathered = cuda.device_array((self.world_size,) + tuple(x.shape), dtype=x.dtype)
        self._comm.allgather(x, gathered, stream=self._stream())
        return gathered

    def broadcast(self, x, root: int = 0):
        self._comm.broadcast(x, x, root, stream=self._stream())
        return x

    def barrier(self) -> None:
        from numba import cuda

        self.all_reduce(cuda.device_array(1, dtype="float32"))
        cuda.synchronize()

    def close(self) -> None:
        self._comm.destroy()

    @staticmethod
    def _stream():
        from kernels_numba import current_cuda_stream

        return current_cuda_stream()
