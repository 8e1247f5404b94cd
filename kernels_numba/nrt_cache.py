"""numba's runtime (NRT) functions loaded as object code instead of compiled in every process.

Before any kernel runs or loads, numba compiles its runtime's few LLVM functions (reference counts, the
unresolved-symbol abort). That one compile runs LLVM's optimiser and x86 code generator, whose code pages then stay
resident: 27 MB of libllvmlite.so and 0.06 s in every warm start, where nothing else compiles. The object code
depends only on numba, llvmlite, the target (numba's magic tuple: triple, CPU name, features) and two settings, so
it is kept beside the kernels' cache under a name made of those, and loaded like a cached kernel.
"""
from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import llvmlite
import numba
from numba.core import config
from numba.core.runtime import nrtdynmod

FILE_PREFIX = "nrt-"
_CACHED = "_pocket_cached"


def install_nrt_cache(cache_dir: Path) -> None:
    """Make numba's runtime start from cache_dir's copy (written by the first start that compiles it)."""
    if getattr(nrtdynmod.compile_nrt_functions, _CACHED, False) or not hasattr(nrtdynmod, "create_nrt_module"):
        return

    def compile_nrt_functions(ctx):
        path = cache_dir / nrt_file_name(ctx.codegen())
        return load_nrt_library(ctx.codegen(), path) or compile_nrt_library(ctx, path)

    setattr(compile_nrt_functions, _CACHED, True)
    nrtdynmod.compile_nrt_functions = compile_nrt_functions


def nrt_file_name(codegen) -> str:
    key = (numba.__version__, llvmlite.__version__, codegen.magic_tuple(), config.OPT, config.DEBUG_NRT)
    return FILE_PREFIX + hashlib.sha256(repr(key).encode()).hexdigest()[:24] + ".nbo"


def load_nrt_library(codegen, path: Path):
    """The runtime library from its saved object code, or None when there is none usable."""
    try:
        state = pickle.loads(path.read_bytes())
        name, kind, (object_code, bitcode) = state
        if name != "nrt" or kind != "object" or not isinstance(object_code, bytes) or not isinstance(bitcode, bytes):
            return None
        return codegen.unserialize_library(state)
    except Exception:  # missing, unreadable or from an interrupted write: compile it again
        return None


def compile_nrt_library(ctx, path: Path):
    """numba's compile of the runtime (nrtdynmod.compile_nrt_functions), its object code kept in path."""
    ir_module, library = nrtdynmod.create_nrt_module(ctx)
    library.enable_object_caching()
    library.add_ir_module(ir_module)
    library.finalize()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(pickle.dumps(library.serialize_using_object_code()))
        os.replace(partial, path)
    except (OSError, RuntimeError, ValueError):  # a read-only cache dir: compiled in each process, as numba does
        pass
    return library
