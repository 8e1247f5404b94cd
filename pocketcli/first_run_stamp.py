"""The mark a first run leaves once a model's CPU kernels are in numba's cache (commands/first_run.py).

A file named by a digest of what the compiled kernels depend on: the kernel sources, the CPU tier settings and
this CPU's features, the Python version and the model file. It lives beside the kernels (NUMBA_CACHE_DIR, else
kernels_numba/cpu/__pycache__), so an emptied cache dir loses it too. Nothing here imports numba or numpy: the
check runs on every start of generate (~3 ms: hashing the ~400 KB of kernel sources).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

STAMP_FOLDER = "pocket_first_run"
# the environment numba's code depends on (kernels_numba/cpu_tier.py sets the CPU pair from the tier)
TIER_SETTINGS = ("POCKET_CPU_TIER", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT", "NUMBA_FASTMATH")


def kernels_dir() -> Path | None:
    """kernels_numba/cpu, found without importing kernels_numba (its import loads LLVM)."""
    spec = importlib.util.find_spec("kernels_numba")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) / "cpu" if locations else None


def stamp_dir(kernels: Path) -> Path:
    cache_root = os.environ.get("NUMBA_CACHE_DIR")
    return Path(cache_root) / STAMP_FOLDER if cache_root else kernels / "__pycache__" / STAMP_FOLDER


def cpu_flags() -> str:
    """This CPU's feature flags (Linux), else the platform's names for it: a new CPU may need other kernels."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:
        import platform

        return f"{platform.machine()} {platform.processor()}"


def sources_digest(kernels: Path) -> bytes:
    digest = hashlib.sha256()
    for source in sorted(kernels.rglob("*.py")):
        if "__pycache__" not in source.parts:
            digest.update(source.relative_to(kernels).as_posix().encode())
            digest.update(source.read_bytes())
    return digest.digest()


def compiler_versions() -> tuple[str, ...]:
    """numba's and llvmlite's version files, read without importing them (importlib.metadata takes ~100 ms): an
    upgrade leaves numba's cache unusable, so a first run comes again."""
    versions = []
    for name in ("numba", "llvmlite"):
        spec = importlib.util.find_spec(name)
        try:
            versions.append(Path(spec.origin).with_name("_version.py").read_text(encoding="utf-8"))
        except (AttributeError, TypeError, OSError):  # not installed as files (a frozen binary skips the stamp)
            versions.append(f"{name} ?")
    return tuple(versions)


def stamp_key(kernels: Path, model_path: str) -> str:
    digest = hashlib.sha256(sources_digest(kernels))
    for part in (cpu_flags(), sys.version, *compiler_versions(), *(os.environ.get(name, "") for name in TIER_SETTINGS)):
        digest.update(part.encode() + b"\0")
    model = os.stat(model_path)
    digest.update(f"{os.path.abspath(model_path)}\0{model.st_size}\0{model.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]


def stamp_path(model_path: str) -> Path | None:
    """Where the first-run mark of this model goes; None when it cannot be told (no model file, no sources)."""
    kernels = kernels_dir()
    if kernels is None or not kernels.is_dir():
        return None
    try:
        return stamp_dir(kernels) / f"{stamp_key(kernels, model_path)}.done"
    except OSError:
        return None


def write_stamp(path: Path) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        return False
    return True


def can_write_stamp(path: Path) -> bool:
    """The stamp's folder can be made and written: else (a read-only install) numba could not keep the kernels
    where the stamp says either, and a first run would never end."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path.parent, os.W_OK)
