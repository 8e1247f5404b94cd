"""A kernel compiles in one process at a time: processes sharing numba's cache wait for one another's compile of a
kernel (function and signature) and load it, instead of compiling it twice at once.

A first run's side child (commands/first_run.py) compiles beside the chain of children, and the two meet kernels
they both need (the mat-vec glue, parts of the attention): each compiled its own copy at the same moment, ~7 s of
the side child's ~30 (Gemma 3 270M, 2-vCPU AMD EPYC Zen 3). Now a cache miss takes the kernel's lock, a byte of
one lock file at an offset hashed from the kernel's cache index and signature (POSIX record locks: released when
the process ends, however it ends), and holds it until its compile is saved or fails; a miss whose lock another
process holds waits for it (at most MAX_WAIT_S), then loads that compile from the cache. Kernels call one another
without cycles, so two processes never wait on each other's locks (the wait is bounded all the same).
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time

try:
    import fcntl
except ImportError:  # Windows: no record locks
    fcntl = None

CAN_LOCK = fcntl is not None
MAX_WAIT_S = 120.0  # past this the waiting process compiles the kernel itself
POLL_S = 0.02
_OFFSET_BITS = 40  # lock offsets: 2^40 bytes of a sparse, empty file
_held: set[int] = set()  # offsets this process holds
_lock_fd: list[int] = []  # the lock file, open for the process's life (closing it would drop every lock)


def lock_file_path() -> str:
    """One lock file per user (another user's would not open for writing) in the temp dir, none in the cache."""
    return os.path.join(tempfile.gettempdir(), f"pocket-numba-compiles-{os.getuid()}.lock")


def kernel_offset(index_path: str, sig) -> int:
    """The lock byte of one kernel: its cache index file (function and source) and its signature."""
    digest = hashlib.sha256(f"{os.path.abspath(index_path)}\0{sig}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (1 << _OFFSET_BITS)


def share_compiles() -> None:
    """From now on, in this process, a numba cache miss compiles under the kernel's lock, or waits for the process
    holding it and loads its compile (idempotent; nothing where the OS has no record locks)."""
    from numba.core import caching, dispatcher

    if not CAN_LOCK or not hasattr(caching.Cache, "_load_overload") or getattr(
            caching.Cache._load_overload, "shares_compiles", False):
        return
    try:
        _lock_fd.append(os.open(lock_file_path(), os.O_RDWR | os.O_CREAT, 0o600))
    except OSError:  # no lock file: each process compiles what it misses, as numba does
        return
    # the load numba's load_overload and kernels_numba/numba_cache_load.py's lean one both call
    caching.Cache._load_overload = _locked_load(caching.Cache._load_overload)
    caching.Cache.save_overload = _unlocking_save(caching.Cache.save_overload)
    dispatcher.Dispatcher.compile = _unlocking_compile(dispatcher.Dispatcher.compile)


def _locked_load(load_overload):
    from numba.core.cpu import CPUContext

    @functools.wraps(load_overload)
    def load(self, sig, target_context):
        data = load_overload(self, sig, target_context)
        if data is not None or not isinstance(target_context, CPUContext):  # numba-cuda's targets: as numba does
            return data
        offset = _offset_of(self, sig)
        if offset is None or offset in _held:
            return None
        if not _try_lock(offset):
            if not _wait_for_lock(offset):
                return load_overload(self, sig, target_context)  # not within MAX_WAIT_S: compile it here too
            data = load_overload(self, sig, target_context)  # the other process's compile, saved
            if data is not None:
                _unlock(offset)
                return data
        _held.add(offset)  # this process compiles it: held until saved (or the compile fails)
        return None

    load.shares_compiles = True
    return load


def _unlocking_save(save_overload):
    @functools.wraps(save_overload)
    def save(self, sig, data):
        try:
            save_overload(self, sig, data)
        finally:
            _release(_offset_of(self, sig))

    return save


def _unlocking_compile(compile_signature):
    @functools.wraps(compile_signature)
    def compile(self, sig):
        before = set(_held)
        try:
            return compile_signature(self, sig)
        finally:
            for offset in _held - before:  # a failed compile (a typing attempt numba then retries otherwise)
                _release(offset)

    return compile


def _offset_of(cache, sig) -> int | None:
    index_path = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return None if index_path is None else kernel_offset(index_path, sig)


def _release(offset: int | None) -> None:
    if offset in _held:
        _held.discard(offset)
        _unlock(offset)


def _try_lock(offset: int) -> bool:
    try:
        fcntl.lockf(_lock_fd[0], fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset, os.SEEK_SET)
    except OSError:
        return False
    return True


def _wait_for_lock(offset: int) -> bool:
    """Whether the lock came (the other process's compile ended) within MAX_WAIT_S."""
    deadline = time.monotonic() + MAX_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        if _try_lock(offset):
            return True
    return False


def _unlock(offset: int) -> None:
    fcntl.lockf(_lock_fd[0], fcntl.LOCK_UN, 1, offset, os.SEEK_SET)
