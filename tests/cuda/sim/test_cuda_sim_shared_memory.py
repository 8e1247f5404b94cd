"""Every lane of a simulated block shares one `cuda.shared.array`, even when a thread is switched out while the
array is being created: the simulator's own lookup-then-store let a second lane create a private copy, and the
mat-vec then summed np.empty garbage (kernels_numba/cuda/sim_shared_memory.py)."""
import threading

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from numba import config

if not config.ENABLE_CUDASIM:  # a real GPU (POCKET_CUDA_DEVICE_TESTS=1) has no simulated lanes to switch
    pytest.skip("the simulator's own shared-array lookup", allow_module_level=True)
from numba.cuda.simulator.kernel import BlockThread  # noqa: E402

from kernels_numba import get_ops
from tests.kernels.kernel_test_data import random_weight, relative_error

cuda_ops, reference = get_ops("cuda"), get_ops("reference")
SECOND_LANE_WAIT_S = 0.2  # how long the first lane stays switched out (the whole wait when creation is locked)


def test_lanes_share_the_mat_vec_tile_while_its_creation_is_slow(monkeypatch):
    """The first lane to create an array (the kernel's shared tile comes first) waits inside np.empty until a
    second lane creates one too: without the lock that is a second tile; with it the others wait for the first."""
    w = random_weight(QT.F32, (32, 32), np.random.default_rng(5))
    x = np.random.default_rng(6).standard_normal((1, 32)).astype(np.float32)
    real_empty, first_lane_taken, second_lane_arrived = np.empty, threading.Lock(), threading.Event()

    def empty_switching_lanes(*args, **kwargs):
        if isinstance(threading.current_thread(), BlockThread):
            if first_lane_taken.acquire(blocking=False):
                second_lane_arrived.wait(SECOND_LANE_WAIT_S)
            else:
                second_lane_arrived.set()
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(np, "empty", empty_switching_lanes)
    y = cuda_ops.to_host(cuda_ops.linear(x, w))
    monkeypatch.undo()
    assert first_lane_taken.locked()  # the kernel did create an array in a lane
    assert relative_error(y, reference.linear(x, w)) < 1e-5
