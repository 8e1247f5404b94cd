"""Runs first in the frozen `pocket`: give numba a persistent cache so JIT results survive between runs.

The one-file binary unpacks itself into a new temporary directory on every run, so numba's default cache (next to
the kernels' sources) is lost at exit; NUMBA_CACHE_DIR (when the user has not set one) points at the user cache dir
and the bundle locator (build/frozen/pocket_numba_cache.py) keys entries by path inside the bundle, not by the
temporary directory's random name. The kernels compiled at build time for this CPU's tier are copied there on
a build's first run (pocket_kernel_cache.py).
"""
import os
import sys

import platformdirs
from pocket_kernel_cache import LOCATOR_CLASSES, install_shipped_kernels

if not os.environ.get("NUMBA_CACHE_DIR"):
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(platformdirs.user_cache_dir("pocketllm", appauthor=False), "numba")
os.environ.setdefault("NUMBA_CACHE_LOCATOR_CLASSES", ",".join(LOCATOR_CLASSES))
install_shipped_kernels(sys._MEIPASS, os.environ["NUMBA_CACHE_DIR"])  # the kernels compiled at build time
