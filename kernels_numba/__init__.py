"""Compute kernels: a numpy reference (the oracle) and fast backends with the same op signatures."""
from __future__ import annotations

import importlib
from types import ModuleType

from kernels_numba.errors import UnsupportedQuantType

_BACKEND_MODULES = {
    "reference": "kernels_numba.reference",
    "cpu": "kernels_numba.cpu",
}


def get_ops(backend: str) -> ModuleType:
    """The ops module of a backend: `reference` (numpy oracle) or `cpu` (numba)."""
    module_name = _BACKEND_MODULES.get(backend)
    if module_name is None:
        known = ", ".join(sorted(_BACKEND_MODULES))
        raise ValueError(f"unknown kernel backend {backend!r}; expected one of: {known}")
    return importlib.import_module(module_name)


__all__ = ["get_ops", "UnsupportedQuantType"]
