"""The lane dots of every kind (ir/byte_dot.py) against numpy: acc + sums of 4 products of unsigned weight bytes
and signed activation bytes, at every width the kernels use (4, 8 and 16 int32 lanes)."""
import numpy as np
import pytest
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from kernels_numba.cpu.ir import byte_dot
from kernels_numba.cpu.ir.vector_ir import load_vector, row_pointer

KINDS_HERE = byte_dot.TARGET_KINDS


def _lane_dot_kernel(kind, zero_point, num_lanes, num_slices=1, max_weight=None):
    """njit (acc int32 [n, lanes], unsigned uint8 [n, slices * 4 lanes], signed int8 [same]) -> out int32 [n, lanes]
    through the kind's lane dot (max_weight None), or its sum over num_slices slice pairs of weights up to
    max_weight."""
    lanes_type, bytes_type = ir.VectorType(ir.IntType(32), num_lanes), ir.VectorType(ir.IntType(8), 4 * num_lanes)

    @intrinsic
    def lane_dot(typingctx, acc, unsigned, signed, out, row):
        def codegen(context, builder, signature, args):
            pointers = [row_pointer(context, builder, array_type, array, args[4])
                        for array_type, array in zip(signature.args[:4], args[:4])]
            start = load_vector(builder, builder.bitcast(pointers[0], ir.IntType(8).as_pointer()), lanes_type,
                                align=4)
            pairs = [tuple(load_vector(builder, builder.gep(pointer, [ir.IntType(64)(4 * num_lanes * j)]), bytes_type)
                           for pointer in pointers[1:3]) for j in range(num_slices)]
            dot = byte_dot.byte_dot(kind, zero_point)
            total = dot.add(builder, start, *pairs[0]) if max_weight is None else dot.sum_slices(
                builder, start, pairs, max_weight)
            builder.store(total, builder.bitcast(pointers[3], lanes_type.as_pointer()), align=4)
            return context.get_dummy_value()
        return types.void(acc, unsigned, signed, out, row), codegen

    @njit
    def run(acc, unsigned, signed, out):
        for row in range(acc.shape[0]):
            lane_dot(acc, unsigned, signed, out, row)
    return run


@pytest.mark.parametrize("kind", KINDS_HERE)
@pytest.mark.parametrize("zero_point", [128, 16, 0])
@pytest.mark.parametrize("num_lanes", [4, 8, 16])
def test_lane_dots_match_numpy(kind, zero_point, num_lanes):
    rng = np.random.default_rng(num_lanes + zero_point)
    n = 64
    max_unsigned = 255 if zero_point == 128 else 2 * zero_point - 1 if zero_point else 63
    unsigned = rng.integers(0, max_unsigned + 1, (n, 4 * num_lanes)).astype(np.uint8)
    unsigned[0] = max_unsigned  # extremes: the most a pair of products can reach
    signed = rng.integers(-127, 128, (n, 4 * num_lanes)).astype(np.int8)
    signed[0], signed[1] = 127, -127
    acc = rng.integers(-10000, 10000, (n, num_lanes)).astype(np.int32)
    products = unsigned.astype(np.int64) * signed
    expected = acc + products.reshape(n, num_lanes, 4).sum(axis=2)
    if not byte_dot.byte_dot(kind, zero_point).uses_starts and zero_point:  # the dot subtracts the zero point
        expected -= zero_point * signed.astype(np.int64).reshape(n, num_lanes, 4).sum(axis=2)
    out = np.empty_like(acc)
    _lane_dot_kernel(kind, zero_point, num_lanes)(acc, unsigned, signed, out)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("kind", KINDS_HERE)
@pytest.mark.parametrize("max_weight, zero_point", [(15, 8), (31, 16), (63, 32)])
def test_slice_sums_hold_the_extremes(kind, max_weight, zero_point):
    """A run's 8 slices summed at once (avx2: in 16-bit words before one vpmaddwd): the exact integers even where
    every product is the largest of its sign (the word sums' worst case)."""
    rng = np.random.default_rng(max_weight)
    n, num_slices, num_lanes = 16, 8, 16
    unsigned = rng.integers(0, max_weight + 1, (n, num_slices * 4 * num_lanes)).astype(np.uint8)
    signed = rng.integers(-127, 128, (n, num_slices * 4 * num_lanes)).astype(np.int8)
    unsigned[:2], signed[0], signed[1] = max_weight, 127, -127
    acc = rng.integers(-10000, 10000, (n, num_lanes)).astype(np.int32)
    products = (unsigned.astype(np.int64) * signed).reshape(n, num_slices, num_lanes, 4).sum(axis=(1, 3))
    expected = acc + products
    if not byte_dot.byte_dot(kind, zero_point).uses_starts:
        expected -= zero_point * signed.astype(np.int64).reshape(n, num_slices, num_lanes, 4).sum(axis=(1, 3))
    out = np.empty_like(acc)
    _lane_dot_kernel(kind, zero_point, num_lanes, num_slices, max_weight)(acc, unsigned, signed, out)
    np.testing.assert_array_equal(out, expected)
