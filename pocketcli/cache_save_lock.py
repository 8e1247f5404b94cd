"""numba's on-disk cache saves, one process at a time (`pocket warmup` compiles kernels in several processes).

numba saves a compile by reading the function's index, adding its entry under the first free data file name and
writing index and data back, with no lock: two processes saving two compiles of one function (one leaf kernel
for two quant types) pick the same data file name, and the index can end up naming the other's code. An
exclusive lock per index file (a file in the temp dir, so none lands in the cache) makes each save whole.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

CAN_LOCK = fcntl is not None


def lock_path(index_path: str) -> str:
    name = hashlib.sha256(os.path.abspath(index_path).encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"pocket-numba-save-{name}.lock")


def lock_cache_saves() -> None:
    """From now on, in this process, every numba cache save holds its index file's lock (idempotent)."""
    from numba.core.caching import IndexDataCacheFile

    save = IndexDataCacheFile.save
    if not CAN_LOCK or getattr(save, "is_locked", False):
        return

    @functools.wraps(save)
    def locked_save(self, key, data):
        with open(lock_path(self._index_path), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            save(self, key, data)

    locked_save.is_locked = True
    IndexDataCacheFile.save = locked_save
