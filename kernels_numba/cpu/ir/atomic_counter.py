"""A shared counter the threads of a parallel region take work items from (atomic fetch-and-add), so a thread that
loses its core for a while leaves the items it has not started to the others.

numba's prange hands each thread a fixed share of the iterations: one thread descheduled for a time slice held the
whole region (and the step) for its share. With one iteration per thread, each taking `claim_next` items until
none is left, the items go to whichever thread is running; the region's end still waits for every thread to
finish the item it holds and check in.
"""
import numpy as np
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def fetch_add(typingctx, counter, value):
    """counter[0] += value as one atomic operation; returns the value before (counter: int64 [>= 1])."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        amount = context.cast(builder, args[1], signature.args[1], types.int64)
        return builder.atomic_rmw("add", array.data, amount, "seq_cst")

    return types.int64(counter, value), codegen


@njit(cache=True)
def new_counter():
    """A counter at 0 (64 bytes, so the work items' own small writes rarely share its cache line)."""
    return np.zeros(8, dtype=np.int64)


@njit(cache=True, inline="always")
def claim_next(counter):
    """The next work item's index (0, 1, 2, ... over all threads); callers stop once it reaches their item count."""
    return fetch_add(counter, 1)

