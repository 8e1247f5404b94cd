"""Warp shuffles and syncwarp for numba's CUDA simulator, which lacks them: it runs the real kernels' code.

Each warp gets a rendezvous (a 32-thread barrier) and an exchange table: every lane posts its value, waits for
the other 31, reads its partner's, and waits again before the table is reused. Our kernels shuffle with whole
warps only, as the hardware requires too. (Block barriers would work as well, but the simulator polls them.)
"""
import threading

RENDEZVOUS_TIMEOUT_S = 120.0  # a lane that died (an exception) must not hang the others forever
_create_lock = threading.Lock()


def _warp_rendezvous():
    """(this lane, its warp's barrier, its warp's exchange table)."""
    thread = threading.current_thread()
    manager, lane, warp = thread._manager, thread.thread_id % 32, thread.thread_id // 32
    with _create_lock:
        warps = manager.__dict__.setdefault("warp_exchanges", {})
        if warp not in warps:
            warps[warp] = (threading.Barrier(32, timeout=RENDEZVOUS_TIMEOUT_S), [None] * 32)
    return (lane, *warps[warp])


def _warp_exchange(value, partner_of):
    lane, barrier, table = _warp_rendezvous()
    table[lane] = value
    barrier.wait()
    partner = partner_of(lane)
    result = table[partner] if 0 <= partner < 32 else value
    barrier.wait()
    return result


def _syncwarp(self, mask=0xFFFFFFFF):
    """A warp barrier (the simulator has block barriers only): every lane of the warp arrives, then all go on."""
    _warp_rendezvous()[1].wait()


def _shfl_xor_sync(self, mask, value, lane_mask):
    return _warp_exchange(value, lambda lane: lane ^ lane_mask)


def _shfl_down_sync(self, mask, value, delta):
    return _warp_exchange(value, lambda lane: lane + delta)


def install_simulated_shuffles() -> None:
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    if not hasattr(FakeCUDAModule, "shfl_xor_sync"):
        FakeCUDAModule.shfl_xor_sync = _shfl_xor_sync
        FakeCUDAModule.shfl_down_sync = _shfl_down_sync
    if not hasattr(FakeCUDAModule, "syncwarp"):
        FakeCUDAModule.syncwarp = _syncwarp
