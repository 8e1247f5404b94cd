"""The f16 <-> f32 conversions LLVM calls on x86 CPUs without F16C (the generic tier, old x86).

With F16C (every tier from avx2 up) and on ARM64 (fcvt) LLVM converts halves with one instruction. On x86 without
it, `fpext half` and `fptrunc ... to half` become calls to compiler-rt/libgcc's __extendhfsf2 and __truncsfhf2,
which numba's JIT linker cannot find on its own: the first kernel that reads an f16 scale aborts the process
("LLVM ERROR: Symbol not found: __extendhfsf2"). libgcc_s (GCC 12 and later) exports both; they are handed to
LLVM's symbol table before any kernel compiles or loads from the cache. Where libgcc_s lacks them, importing the
kernels raises a clear error instead of an abort mid-run.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

import llvmlite.binding as llvm

HALF_CONVERSIONS = ("__extendhfsf2", "__truncsfhf2")


class MissingHalfConversions(RuntimeError):
    """The CPU lacks F16C and no library here provides the f16 conversions LLVM calls instead."""


def needs_half_conversions(features: frozenset[str], machine: str) -> bool:
    """Whether code compiled with these target features on this machine calls the conversion functions."""
    return machine.lower() in ("x86_64", "amd64", "i386", "i686") and "f16c" not in features


def register_half_conversions(features: frozenset[str], machine: str = platform.machine()) -> bool:
    """Give LLVM the conversion functions where the target needs them; whether any were registered."""
    if not needs_half_conversions(features, machine):
        return False
    library = _load_libgcc()
    missing = [name for name in HALF_CONVERSIONS if library is None or not hasattr(library, name)]
    if missing:
        raise MissingHalfConversions(
            f"this CPU has no F16C and no libgcc_s with {', '.join(missing)} (GCC 12 or later) was found: the "
            "CPU kernels cannot convert f16 values here")
    for name in HALF_CONVERSIONS:
        llvm.add_symbol(name, ctypes.cast(getattr(library, name), ctypes.c_void_p).value)
    return True


def _load_libgcc():
    for name in ("libgcc_s.so.1", ctypes.util.find_library("gcc_s")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return None
