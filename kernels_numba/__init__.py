"""Compute kernels: a numpy reference (the oracle) and fast backends with the same op signatures."""
from __future__ import annotations

import importlib
import importlib.util  # noqa: F401  (numba-cuda's import hook uses it without importing it)
import sys
from types import ModuleType

from kernels_numba.cpu_tier import apply_cpu_tier
from kernels_numba.errors import UnsupportedQuantType

# before any kernel module imports numba: numba reads its CPU name and features once (cpu_tier.py)
apply_cpu_tier()


def _narrow_numba_cuda_redirector() -> None:
    """numba-cuda's import hook (_numba_cuda_redirector) claims every module whose name contains "numba.cuda",
    "kernels_numba.cuda" included, and then recurses forever: let it see numba.cuda and its submodules only."""
    for finder in sys.meta_path:
        if type(finder).__name__ == "NumbaCudaFinder" and not getattr(finder, "narrowed", False):
            claim = finder.find_spec

            def find_spec(name, path, target=None, claim=claim):
                return claim(name, path, target) if name.split(".")[:2] == ["numba", "cuda"] else None

            finder.find_spec, finder.narrowed = find_spec, True


_narrow_numba_cuda_redirector()

_BACKEND_MODULES = {
    "reference": "kernels_numba.reference",
    "cpu": "kernels_numba.cpu",
    "cuda": "kernels_numba.cuda",  # numba-cuda (the `cuda` extra); runs under NUMBA_ENABLE_CUDASIM=1 too
}


# Names above kernels_numba may use beyond the ops (host sampling, thread policy, the CPU kernels' size
# thresholds, ahead-of-time compiling, the CUDA stream and captured step): public here, loaded from their
# backend module on first use, so importing kernels_numba stays light and a backend can regroup its files
# without breaking the engine
# (tests/test_import_graph.py: nothing above this package imports kernels_numba.cpu.* or .cuda.*).
_PUBLIC_NAMES = {
    "softmax_draw_rows": ("kernels_numba.cpu.softmax_draw", "softmax_draw_rows"),
    "DRAW_BLOCK": ("kernels_numba.cpu.softmax_draw", "DRAW_BLOCK"),
    "NO_TOKEN": ("kernels_numba.cpu.softmax_draw", "NO_TOKEN"),
    "FreeCoreThreads": ("kernels_numba.cpu.free_cores", "FreeCoreThreads"),
    "MIN_BLOCKED_QUERIES": ("kernels_numba.cpu.attention", "MIN_BLOCKED_QUERIES"),
    "MAX_RUN_TOKENS": ("kernels_numba.cpu.matvec.dispatch", "MAX_RUN_TOKENS"),
    "register_row_codecs": ("kernels_numba.cpu.kv_row", "register_row_codecs"),
    "PARALLEL_MIN_WORK": ("kernels_numba.cpu.parallel_policy", "PARALLEL_MIN_WORK"),
    "use_threads": ("kernels_numba.cpu.parallel_policy", "use_threads"),
    "leaf_jobs": ("kernels_numba.cpu.matvec.dispatch", "leaf_jobs"),
    "compile_leaf": ("kernels_numba.cpu.matvec.dispatch", "compile_leaf"),
    "current_cuda_stream": ("kernels_numba.cuda.launch_stream", "current_stream"),
    "CapturedStep": ("kernels_numba.cuda.decode_graph", "CapturedStep"),
}


def __getattr__(name: str):
    if name not in _PUBLIC_NAMES:
        raise AttributeError(f"module 'kernels_numba' has no attribute {name!r}")
    module_name, attribute = _PUBLIC_NAMES[name]
    return getattr(importlib.import_module(module_name), attribute)


def get_ops(backend: str) -> ModuleType:
    """The ops module of a backend: `reference` (numpy oracle), `cpu` (numba) or `cuda` (numba-cuda)."""
    module_name = _BACKEND_MODULES.get(backend)
    if module_name is None:
        known = ", ".join(sorted(_BACKEND_MODULES))
        raise ValueError(f"unknown kernel backend {backend!r}; expected one of: {known}")
    return importlib.import_module(module_name)


__all__ = ["get_ops", "UnsupportedQuantType", *_PUBLIC_NAMES]
