"""Drop numba's on-disk cache of this package when any of its sources changed.

numba invalidates a cached function only when the function's own file changes, not when a kernel it calls
(in another file) does; a stale cache would then run old code. A digest of all sources (the package and its
subfolders: matvec/, ir/) is kept next to the package's cache; each folder has its own cache dir, all dropped
together.
"""
import hashlib
import os
import sys
from pathlib import Path

from numba.core import config
from numba.core.caching import _CacheLocator

_STAMP_NAME = "kernel_sources.sha256"


def source_dirs(package_dir: Path) -> list[Path]:
    """The package folder and every subfolder holding Python sources (numba caches each folder apart)."""
    return [package_dir] + sorted(path for path in package_dir.rglob("*") if path.is_dir()
                                  and path.name != "__pycache__" and any(path.glob("*.py")))


def sources_digest(package_dir: Path) -> str:
    digest = hashlib.sha256()
    for source in sorted(package_dir.rglob("*.py")):
        if "__pycache__" not in source.parts:
            digest.update(source.relative_to(package_dir).as_posix().encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def numba_cache_dir(package_dir: Path) -> Path:
    """Where numba keeps the package's compiled kernels: NUMBA_CACHE_DIR (by numba's own sub-path rule, or the
    frozen binary's per-bundle path) when set, else the package's __pycache__."""
    if not config.CACHE_DIR:
        return package_dir / "__pycache__"
    bundle = getattr(sys, "_MEIPASS", None) if getattr(sys, "frozen", False) else None
    if bundle:  # build/frozen/pocket_numba_cache.py keys the cache by the path inside the bundle
        return Path(config.CACHE_DIR) / "bundle" / os.path.relpath(package_dir, bundle)
    return Path(config.CACHE_DIR) / _CacheLocator.get_suitable_cache_subpath(str(package_dir / "__init__.py"))


def clear_stale_numba_cache(package_dir: Path) -> None:
    """Delete the package's *.nbi/*.nbc files if its sources differ from those they were compiled from."""
    cache_dir = numba_cache_dir(package_dir)
    stamp = cache_dir / _STAMP_NAME
    digest = sources_digest(package_dir)
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for folder in source_dirs(package_dir):
            folder_cache = numba_cache_dir(folder)
            for cached in list(folder_cache.glob("*.nbi")) + list(folder_cache.glob("*.nbc")):
                cached.unlink(missing_ok=True)
        cache_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # read-only install: numba then falls back to its own cache location
        pass


def has_compiled_cache(package_dir: Path) -> bool:
    """True when compiled kernels for the current sources are on disk (the next run starts fast)."""
    cache_dir = numba_cache_dir(package_dir)
    try:
        return (cache_dir / _STAMP_NAME).read_text() == sources_digest(package_dir) and any(
            any(numba_cache_dir(folder).glob("*.nbi")) for folder in source_dirs(package_dir))
    except OSError:
        return False
