"""cblas_sgemm of the OpenBLAS numpy already loaded, callable from numba threads (prange bodies).

Prefill is GEMM-bound, and numpy's matmul runs on the calling thread only (OpenBLAS is kept single-threaded: its
spinning pool fights numba's, see matmul.py). Calling sgemm from inside a numba parallel loop puts both cores on
one pool. numba's own np.dot needs SciPy; here the function address comes from the library numpy loaded and is
passed to the kernels at run time (a constant address baked into the code would break numba's on-disk cache).
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enum values
# (symbol prefix, suffix, 64-bit ints): numpy >= 2 wheels (scipy-openblas64), numpy 1.x wheels, a system OpenBLAS
_SYMBOL_STYLES = (("scipy_", "64_", True), ("", "64_", True), ("", "", False))


@dataclass(frozen=True)
class Sgemm:
    address: int  # of cblas_sgemm
    ilp64: bool  # 64-bit integer arguments


@dataclass(frozen=True)
class OpenBLAS:
    sgemm: Sgemm
    get_num_threads: Callable[[], int]
    set_num_threads: Callable[[int], None]  # for tests (pocketcli sets OPENBLAS_NUM_THREADS=1 before numpy loads)


def _loaded_openblas_paths() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (numpy's), from /proc/self/maps (Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/"))


def _symbols(library: ctypes.CDLL, prefix: str, suffix: str) -> tuple | None:
    try:
        return tuple(getattr(library, f"{prefix}{name}{suffix}")
                     for name in ("cblas_sgemm", "openblas_get_num_threads", "openblas_set_num_threads"))
    except AttributeError:
        return None


@functools.cache
def loaded_openblas() -> OpenBLAS | None:
    """The OpenBLAS numpy loaded, or None (numpy on another BLAS, or not Linux)."""
    import numpy  # noqa: F401  (loads OpenBLAS)
    for path in _loaded_openblas_paths():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, ilp64 in _SYMBOL_STYLES:
            symbols = _symbols(library, prefix, suffix)
            if symbols is not None:
                sgemm, get_threads, set_threads = symbols
                get_threads.restype = ctypes.c_int
                set_threads.argtypes = [ctypes.c_int]
                return OpenBLAS(Sgemm(ctypes.cast(sgemm, ctypes.c_void_p).value, ilp64), get_threads, set_threads)
    return None


def find_sgemm() -> Sgemm | None:
    """numpy's cblas_sgemm while its OpenBLAS runs single-threaded (pocketcli sets OPENBLAS_NUM_THREADS=1), else None:
    a multi-threaded OpenBLAS called from numba threads would spin its own pool against numba's."""
    openblas = loaded_openblas()
    if openblas is None or openblas.get_num_threads() != 1:
        return None
    return openblas.sgemm


@intrinsic
def sgemm_with_int_width(typingctx, address, ilp64, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc):
    """C[m, n] = A[m, k] @ op(B) + beta C, row-major float32, through the cblas_sgemm at `address`.

    op(B) = B[n, k].T when trans_b is TRANS, B[k, n] when NO_TRANS; a, b, c are data addresses (arr.ctypes.data).
    ilp64 (a compile-time bool) picks 64- or 32-bit integer arguments.
    """
    if not isinstance(ilp64, types.BooleanLiteral):
        return None
    int_type = ir.IntType(64 if ilp64.literal_value else 32)
    enum_type, float_type, pointer_type = ir.IntType(32), ir.FloatType(), ir.FloatType().as_pointer()
    function_type = ir.FunctionType(ir.VoidType(), [enum_type, enum_type, enum_type, int_type, int_type, int_type,
                                                    float_type, pointer_type, int_type, pointer_type, int_type,
                                                    float_type, pointer_type, int_type])

    def codegen(context, builder, signature, args):
        _, _, trans_b_, m_, n_, k_, a_, lda_, b_, ldb_, beta_, c_, ldc_ = args
        function = builder.inttoptr(args[0], function_type.as_pointer())

        def integer(value):
            return builder.trunc(value, int_type) if int_type.width < 64 else value

        def pointer(value):
            return builder.inttoptr(value, pointer_type)

        order, trans_a = ir.Constant(enum_type, ROW_MAJOR), ir.Constant(enum_type, NO_TRANS)
        builder.call(function, [order, trans_a, builder.trunc(trans_b_, enum_type), integer(m_), integer(n_),
                                integer(k_), ir.Constant(float_type, 1.0), pointer(a_), integer(lda_), pointer(b_),
                                integer(ldb_), beta_, pointer(c_), integer(ldc_)])
        return context.get_dummy_value()

    int64 = types.int64
    return types.none(int64, ilp64, int64, int64, int64, int64, int64, int64, int64, int64, types.float32, int64,
                      int64), codegen


@njit(cache=True, nogil=True)
def sgemm(address, ilp64, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc):
    """sgemm_with_int_width with ilp64 known only at run time (Sgemm.ilp64)."""
    if ilp64:
        sgemm_with_int_width(address, True, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc)
    else:
        sgemm_with_int_width(address, False, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc)
