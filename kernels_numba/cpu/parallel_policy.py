"""When a kernel should wake numba's thread pool, and into how many chunks it splits its work.

A parallel region costs a thread wake-up (microseconds on an idle machine, a scheduler time slice on a busy
one), so small calls such as decode-sized norms run on the calling thread.
"""
import numba

PARALLEL_MIN_WORK = 1 << 18  # elements touched (weights, activations, q.k terms) worth waking the pool for
CHUNKS_PER_THREAD = 4  # static chunks per thread: some load balance without much per-chunk setup


def use_threads(work: int, min_work: int | None = None) -> bool:
    """Whether `work` elements are worth a parallel region (min_work defaults to PARALLEL_MIN_WORK)."""
    return work >= (PARALLEL_MIN_WORK if min_work is None else min_work) and numba.get_num_threads() > 1


def num_chunks(num_items: int) -> int:
    return max(1, min(num_items, CHUNKS_PER_THREAD * numba.get_num_threads()))
