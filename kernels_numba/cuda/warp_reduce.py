"""Warp-wide reductions by butterfly shuffles: every lane ends with the result (all 32 lanes must take part)."""
from numba import cuda

FULL_MASK = 0xFFFFFFFF
WARP_SIZE = 32


@cuda.jit(device=True)
def warp_sum(value):
    offset = 16
    while offset > 0:
        value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
        offset //= 2
    return value


@cuda.jit(device=True)
def warp_max(value):
    offset = 16
    while offset > 0:
        value = max(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
        offset //= 2
    return value


@cuda.jit(device=True)
def warp_argmax(value, index):
    """The (largest value, smallest index among ties) pair over the warp."""
    offset = 16
    while offset > 0:
        other_value = cuda.shfl_xor_sync(FULL_MASK, value, offset)
        other_index = cuda.shfl_xor_sync(FULL_MASK, index, offset)
        if other_value > value or (other_value == value and other_index < index):
            value, index = other_value, other_index
        offset //= 2
    return value, index
