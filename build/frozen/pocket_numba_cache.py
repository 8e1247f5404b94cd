"""A numba cache locator for code unpacked from the one-file binary (bundled only into the frozen app).

numba's own NUMBA_CACHE_DIR locator names the cache directory after the absolute source directory, which for a
one-file app is a fresh `_MEIxxxxxx` temp dir on every run: every run would compile again. This locator keys the
cache by the path inside the bundle and stamps it with the digest of the kernel sources the binary was built from
(pocket_kernel_cache.build_stamp), so a rebuilt binary never loads kernels compiled from older sources, and the
caches compiled at build time (shipped in the binary, one per CPU tier) carry the stamp the binary looks for.
"""
from __future__ import annotations

import os
import sys

from numba.core import config
from numba.core.caching import _CacheLocator
from pocket_kernel_cache import build_stamp


def bundle_dir() -> str | None:
    return getattr(sys, "_MEIPASS", None) if getattr(sys, "frozen", False) else None


def path_in_bundle(py_file: str, bundle: str) -> str | None:
    """`py_file` relative to the bundle root, or None when it lies outside (or numba gave a placeholder)."""
    absolute = os.path.normpath(os.path.join(bundle, py_file))  # code objects may carry bundle-relative names
    if not os.path.isfile(absolute):
        return None
    relative = os.path.relpath(absolute, bundle)
    return None if relative.startswith(os.pardir) else relative


class BundleCacheLocator(_CacheLocator):
    def __init__(self, py_func, relative_file: str):
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(config.CACHE_DIR, "bundle", os.path.dirname(relative_file))

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        return build_stamp()

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        bundle = bundle_dir()
        relative = path_in_bundle(py_file, bundle) if bundle and config.CACHE_DIR else None
        if relative is None:
            return None
        locator = cls(py_func, relative)
        try:
            locator.ensure_cache_path()
        except OSError:  # unwritable cache dir: numba falls back to its next locator
            return None
        return locator
