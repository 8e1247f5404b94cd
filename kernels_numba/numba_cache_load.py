"""Loading kernels from numba's on-disk cache with only what running them needs.

numba readies a process for compiling even when every kernel comes from its cache (a warm start):
- each cache load first refreshes the CPU target: it imports and registers every implementation numba has
  (linalg, random, typed containers, ...) for a compile that does not come: 0.3-0.45 s and 13 MB of RSS on a
  2-core AMD EPYC. A load needs only numba's runtime (NRT) started; a compile still refreshes (numba's
  CompilerBase does it before compiling).
- each loaded kernel's LLVM bitcode is parsed into a module kept for linking it into later compiles, and read for
  the names the kernel defines: 0.14 s and ~15 MB for generate's 28 kernels. Here the bitcode stays unparsed
  until a compile links the kernel; the names come from the object code (object_symbols.py).
Both are numba internals (0.60-0.68): where one is not there as expected, numba's own way is kept.
"""
from __future__ import annotations

import llvmlite.binding as llvm
from numba.core import caching, codegen
from numba.core.cpu import CPUContext
from numba.core.runtime import rtsys

from kernels_numba.object_symbols import defined_symbols

_LEAN = "_pocket_lean"  # marks a method replaced here (installed once per process)


def install_lean_cache_loads() -> None:
    """Replace numba's cache load (CPU targets only) and its library unpickling by the lean ones; idempotent."""
    if _can_skip_refresh() and not getattr(caching.Cache.load_overload, _LEAN, False):
        caching.Cache.load_overload = _lean_load_overload(caching.Cache.load_overload)
    if _can_defer_bitcode() and not getattr(codegen.CPUCodeLibrary._get_module_for_linking, _LEAN, False):
        library_class = codegen.CPUCodeLibrary
        library_class._unserialize = classmethod(_lean_unserialize(library_class._unserialize.__func__))
        library_class._get_module_for_linking = _parse_on_link(library_class._get_module_for_linking)


def _can_skip_refresh() -> bool:
    return all(hasattr(caching.Cache, name) for name in ("_load_overload", "_guard_against_spurious_io_errors"))


def _can_defer_bitcode() -> bool:
    return all(hasattr(codegen.CPUCodeLibrary, name) for name in (
        "_unserialize", "_get_module_for_linking", "enable_object_caching", "_set_compiled_object",
        "_finalize_final_module")) and hasattr(codegen.JitEngine, "is_symbol_defined")


def _lean_load_overload(numba_load):
    def load_overload(self, sig, target_context):
        if not isinstance(target_context, CPUContext):  # numba-cuda's targets: numba's own way
            return numba_load(self, sig, target_context)
        rtsys.initialize(target_context)  # what a loaded kernel calls into (refcounts, allocation)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    setattr(load_overload, _LEAN, True)
    return load_overload


def _lean_unserialize(numba_unserialize):
    def unserialize(cls, codegen_, state):
        name, kind, data = state
        engine = getattr(codegen_, "_engine", None)
        symbols = defined_symbols(data[0]) if kind == "object" and engine is not None else None
        if symbols is None:
            return numba_unserialize(cls, codegen_, state)
        library = codegen_.create_library(name)
        library.enable_object_caching()
        library._set_compiled_object(data[0])
        library._unparsed_bitcode = data[1]  # parsed by the first compile that links this library
        library._finalize_final_module()
        engine._defined_symbols |= symbols
        return library

    return unserialize


def _parse_on_link(numba_module_for_linking):
    def module_for_linking(self):
        bitcode = getattr(self, "_unparsed_bitcode", None)
        if bitcode is not None and self._shared_module is None:
            self._shared_module = llvm.parse_bitcode(bitcode)
            self._unparsed_bitcode = None
        return numba_module_for_linking(self)

    setattr(module_for_linking, _LEAN, True)
    return module_for_linking
