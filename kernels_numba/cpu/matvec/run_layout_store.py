"""Run layouts kept on disk, so a warm start reads a model's regrouped weights instead of regrouping them again.

Regrouping the default model (run_layout.repack) takes 1.5-5 s on 2 cores, most of a warm `pocket generate`.
Where POCKET_RUN_LAYOUT_DIR names a folder (the CLI sets `<user cache dir>/run_layout`; unset, as in tests and
library use, nothing is kept), each regrouped tensor of a mapped model file is written there once, under a digest
of (the file's path, size and mtime, the tensor's offset and size, its run code and shape, run_layout.py's source),
to a temporary name renamed into place (a crash or a second process never leaves half a file under the final
name). Later runs read it back instead of regrouping (into the weight arena's huge pages: weight_arena.py). The
folder keeps at most POCKET_RUN_LAYOUT_CACHE_MB megabytes (default 2048; 0 turns the store off): the least
recently used files go first. Failing to write (disk full, read-only folder) only costs the next run the
regrouping.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from gguf_loader.private_bytes import file_span, read_into

DIR_ENV = "POCKET_RUN_LAYOUT_DIR"
LIMIT_ENV = "POCKET_RUN_LAYOUT_CACHE_MB"
DEFAULT_LIMIT_MB = 2048
SUFFIX = ".runs"


def store_dir() -> Path | None:
    """The store's folder, or None when nothing is to be kept."""
    folder = os.environ.get(DIR_ENV)
    return Path(folder) if folder and limit_bytes() > 0 else None


def limit_bytes() -> int:
    try:
        return int(float(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_MB)) * 2**20)
    except ValueError:
        return DEFAULT_LIMIT_MB * 2**20


@functools.lru_cache(maxsize=1)
def _layout_source_digest() -> str:
    """run_layout.py's source: a changed layout never reads files written by the old one."""
    return hashlib.sha256((Path(__file__).parent / "run_layout.py").read_bytes()).hexdigest()


def layout_key(raw: np.ndarray, run_code: int) -> str | None:
    """The store's name for the run layout (run code `run_code`) of `raw`, a view of a mapped model file; None
    for arrays not mapped from a file (nothing to key them by)."""
    span = file_span(raw)
    if span is None:
        return None
    file_name, file_offset = span[0], span[1]
    try:
        stat = os.stat(file_name)
    except OSError:
        return None
    identity = (os.path.realpath(file_name), stat.st_size, stat.st_mtime_ns, file_offset, raw.nbytes, run_code,
                raw.shape, _layout_source_digest())
    return hashlib.sha256(repr(identity).encode()).hexdigest()[:40]


def load_layout(key: str | None, shape: tuple[int, ...], empty=None) -> np.ndarray | None:
    """The stored layout under `key`, read into empty(shape) (a writable uint8 array; np.empty by default), or
    None where there is none (or it cannot be read whole)."""
    folder = store_dir()
    if key is None or folder is None:
        return None
    path = folder / (key + SUFFIX)
    try:
        with open(path, "rb", buffering=0) as file:
            if os.fstat(file.fileno()).st_size != int(np.prod(shape)):
                return None
            layout = np.empty(shape, dtype=np.uint8) if empty is None else empty(shape)
            if not read_into(file, layout):
                return None
        os.utime(path)  # the least recently used files are evicted first
    except (OSError, ValueError):
        return None
    return layout


def save_layout(key: str | None, packed: np.ndarray) -> None:
    """Keep `packed` under `key` (written to a temporary name, then renamed), then evict down to the limit."""
    folder = store_dir()
    if key is None or folder is None or packed.nbytes > limit_bytes():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp", delete=False) as file:
            temporary = Path(file.name)
            np.ascontiguousarray(packed).tofile(file)
        os.replace(temporary, folder / (key + SUFFIX))
    except OSError:
        _remove(locals().get("temporary"))
        return
    evict(folder, limit_bytes())


def evict(folder: Path, limit: int) -> None:
    """Delete the least recently used stored layouts until the folder holds at most `limit` bytes."""
    try:
        entries = [(entry.stat().st_mtime_ns, entry.stat().st_size, entry) for entry in folder.glob("*" + SUFFIX)]
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries):
        if total <= limit:
            break
        _remove(entry)
        total -= size


def _remove(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
