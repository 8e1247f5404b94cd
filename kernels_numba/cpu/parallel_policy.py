"""When a kernel should wake numba's thread pool, and into how many chunks it splits its work.

A parallel region costs a thread wake-up (microseconds on an idle machine, a scheduler time slice on a busy
one), so small calls such as decode-sized norms run on the calling thread.
"""
import numba
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

PARALLEL_MIN_WORK = 1 << 18  # elements touched (weights, activations, q.k terms) worth waking the pool for
CHUNKS_PER_THREAD = 4  # static chunks per thread: some load balance without much per-chunk setup

# the pool's get/set_num_threads symbols exist once the threading layer is loaded; compiled code (also code
# loaded from numba's cache) links against them
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
