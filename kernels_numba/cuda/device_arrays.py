"""Host <-> device arrays for the launchers: activations come in as numpy or device arrays, outputs are device
arrays; parameters (norm weights, biases, rope factors) are uploaded once and cached by identity."""
from __future__ import annotations

import numpy as np
from numba import cuda

from kernels_numba.cuda.launch_stream import keep_alive

_PARAMETERS: dict[int, tuple[np.ndarray, object]] = {}  # id(host array) -> (host array kept alive, device copy)


def is_device_array(x) -> bool:
    return hasattr(x, "copy_to_host")


def as_device(x, dtype=np.float32):
    """A device array of `x`: itself when it already lives on the device, else an upload (a copy)."""
    if is_device_array(x):
        return x
    return keep_alive(cuda.to_device(np.ascontiguousarray(x, dtype=dtype)))


def parameter(x, dtype=np.float32):
    """A constant host array's device copy, uploaded on first use only."""
    if is_device_array(x):
        return x
    cached = _PARAMETERS.get(id(x))
    if cached is None or cached[0] is not x:
        cached = (x, cuda.to_device(np.ascontiguousarray(x, dtype=dtype)))
        _PARAMETERS[id(x)] = cached
    return cached[1]


def empty(shape, dtype=np.float32, out=None):
    """`out` when the caller passed one, else a new device array."""
    if out is not None:
        return out
    return keep_alive(cuda.device_array(shape, dtype=dtype))


def zeros(shape, dtype=np.float32):
    """A zero-filled device array (e.g. a KV cache layer), cleared on the device (no host buffer)."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return cuda.to_device(np.zeros(shape, dtype=dtype))
    from numba.cuda.cudadrv.driver import device_memset

    array = cuda.device_array(shape, dtype=dtype)
    if array.size:
        device_memset(array, 0, array.nbytes)
    return array


def to_host(x) -> np.ndarray:
    return x.copy_to_host() if is_device_array(x) else np.asarray(x)


def contiguous(x):
    """x as the kernels take it: device arrays the launchers make are C-contiguous float32 already."""
    return x


def can_write_into(x) -> bool:
    """Whether an op may write its result into x: never here (device results keep their own buffers)."""
    return False


def free_memory_bytes() -> int | None:
    """None: the device's memory is not checked ahead (a KV cache too big for it fails when it is allocated)."""
    return None


def blocks_for(count: int, per_block: int) -> int:
    return max(1, -(-count // per_block))
