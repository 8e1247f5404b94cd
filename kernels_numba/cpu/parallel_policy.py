"""When a kernel should wake numba's thread pool, and into how many chunks it splits its work.

A parallel region costs a thread wake-up (microseconds on an idle machine, a scheduler time slice on a busy
one), so small calls such as decode-sized norms run on the calling thread.

numba's OpenMP pool (GNU libgomp here) spins ~150 us, not ~7 ms, before a worker sleeps between regions
(GOMP_SPINCOUNT=6000 against libgomp's 300k, unless the user set it or OMP_WAIT_POLICY; a spin is one `pause`,
~25 ns on AMD Zen 4): a worker spinning for the next region burns the process's share of a busy machine and the
thread with work loses its time slice. 1B decode step at 2 threads, median, variants alternating (AMD EPYC Zen 4):
load 3.5-3.9, default 192.5 / 644.3 ms, 1000 spins 50.5 / 54.8, passive (no spin) 49.5 / 48.1; load 1.4-1.5,
default 27.2 / 26.3, 1000 spins 22.1 / 26.3, passive 27.9 / 27.6 (a futex wake a region costs when the box is
quiet). 6000 rather than 1000 spins covers the gaps between a decode layer's regions (norms, rope, attention:
tens of us), so the next region finds the worker awake: SmolLM2 serve steps of 8 sequences, AVX2 tier, 2 threads,
4 alternating rounds (bench/profile_serve_step.py) 17.55 / 16.09 / 20.05 / 18.10 ms -> 15.11 / 14.88 / 19.79 /
17.55; Gemma 3 270M tg128 idle 85.5 vs 86.9 tok/s, one core busy 76.6 vs 78.8 (both then on 1 thread:
free_cores.py), the mean of 3 each.
"""
import os

import numba
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

from kernels_numba.cpu.ir.native_call import call_native

GOMP_SPINS = 6000  # libgomp's spins before a waiting worker sleeps (see the docstring)
PARALLEL_MIN_WORK = 1 << 18  # elements touched (weights, activations, q.k terms) worth waking the pool for
CHUNKS_PER_THREAD = 4  # static chunks per thread: some load balance without much per-chunk setup

# the pool's get/set_num_threads symbols exist once the threading layer is loaded; compiled code (also code
# loaded from numba's cache) links against them
if "OMP_WAIT_POLICY" not in os.environ:  # libgomp reads these once, when the line below loads it
    os.environ.setdefault("GOMP_SPINCOUNT", str(GOMP_SPINS))
_launch_threads()


@njit(cache=True, inline="always")
def chunk_span(chunk, chunks, num_items):
    """(first, stop) of chunk `chunk` of `chunks` contiguous, near-equal chunks of num_items (possibly empty)."""
    per_chunk = (num_items + chunks - 1) // chunks
    first = min(num_items, chunk * per_chunk)
    return first, min(num_items, first + per_chunk)


def use_threads(work: int, min_work: int | None = None) -> bool:
    """Whether `work` elements are worth a parallel region (min_work defaults to PARALLEL_MIN_WORK)."""
    return work >= (PARALLEL_MIN_WORK if min_work is None else min_work) and numba.get_num_threads() > 1


def num_chunks(num_items: int) -> int:
    return max(1, min(num_items, CHUNKS_PER_THREAD * numba.get_num_threads()))


@intrinsic
def pool_threads(typingctx):
    """numba.get_num_threads() for compiled code that stays cacheable (numba's own jitted version calls a ctypes
    pointer, which numba refuses to cache): the threading layer's get_num_threads by symbol."""
    def codegen(context, builder, signature, args):
        get = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "get_num_threads")
        return builder.sext(builder.call(get, []), ir.IntType(64))

    return types.int64(), codegen


@intrinsic
def set_pool_threads(typingctx, count):
    """numba.set_num_threads(count) for cacheable compiled code (count: 1 .. NUMBA_NUM_THREADS, unchecked)."""
    if not isinstance(count, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        set_threads = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(32)]), "set_num_threads")
        builder.call(set_threads, [builder.trunc(args[0], ir.IntType(32))
                                   if args[0].type.width > 32 else args[0]])
        return context.get_dummy_value()

    return types.void(count), codegen


@njit(cache=True)
def pool_chunks(num_items, work, min_work):
    """Chunks to split num_items into: CHUNKS_PER_THREAD a thread where `work` elements reach min_work and the
    pool has more than one thread, else 1 (a runtime count either way: a literal 1 would compile the kernel twice)."""
    threads = pool_threads()
    if threads > 1 and work >= min_work:
        return max(1, min(num_items, CHUNKS_PER_THREAD * threads))
    return 1


@njit(cache=True)
def call_native_in_chunks(kernel, args, chunks):
    """kernel(*args, chunks) for a parallel leaf kernel handle (ir/native_call.py). One chunk runs with numba's
    pool limited to the calling thread: the parallel entry still gives its loop body noalias array arguments
    (1.3-2.2x faster than the same code as a plain njit function: matmul.matvec_into) without waking the pool."""
    threads = pool_threads()
    if chunks == 1:
        set_pool_threads(1)
    call_native(kernel, args + (chunks,))
    if chunks == 1:
        set_pool_threads(threads)
