"""Static shared arrays for numba's CUDA simulator, created once per launch under a lock.

The simulator's own `cuda.shared.array` looks the array up by the calling (file, line) and creates it when
missing, with no lock: a thread switched out between the lookup and the store lets a second thread create its
own array, so those lanes no longer share memory and the tile's reader sums np.empty garbage (values like 1e17:
the likely cause of an rms_norm overflow warning and wrong tokens in one full simulator run out of several). It
also walks the whole stack with traceback.extract_stack, reading source lines; one frame lookup names the caller.
"""
import sys
import threading

import numpy as np

_create_lock = threading.Lock()
_simulator_array = {}  # "array": the simulator's FakeCUDAShared.array, for dynamic shared memory


def _shared_array(self, shape, dtype, alignment=None):
    if shape == 0 or alignment is not None:  # dynamic shared memory (no lookup), or the simulator's own error
        return _simulator_array["array"](self, shape, dtype, alignment)
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)
    with _create_lock:
        array = self._allocations.get(key)
        if array is None:
            array = self._allocations[key] = np.empty(shape, _numpy_dtype(dtype))
    return array


def _numpy_dtype(dtype):
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    return numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype


def install_locked_shared_arrays() -> None:
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    if FakeCUDAShared.array is not _shared_array:
        _simulator_array["array"] = FakeCUDAShared.array
        FakeCUDAShared.array = _shared_array
