"""LLVM IR building blocks shared by the hand-written SIMD kernels (int8_dot, amx_dot): vector loads, prefetch,
fp16 scalars, lane broadcasts and reductions, row pointers of numba arrays, a compiler memory barrier."""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils

I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()


def load_vector(builder, pointer, vector_type, align=1):
    return builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=align)


def prefetch(builder, pointer):
    byte_pointer = I8.as_pointer()
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, I32, I32, I32]), "llvm.prefetch.p0i8")
    builder.call(function, [pointer, I32(0), I32(3), I32(1)])  # read, keep in all cache levels, data


def load_half(builder, pointer, offset=0):
    half_pointer = builder.bitcast(builder.gep(pointer, [I64(offset)]), ir.HalfType().as_pointer())
    return builder.fpext(builder.load(half_pointer, align=1), F32)


def fma(builder, a, b, c):
    """a * b + c on float32 vectors (llvm.fma: one vfmadd where the target has FMA)."""
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(a.type, [a.type] * 3), f"llvm.fma.v{a.type.count}f32")
    return builder.call(function, [a, b, c])


def broadcast_runs(builder, values, vector_type):
    """A vector of vector_type whose lanes repeat `values` in equal runs: (a, b) -> a x 8, b x 8."""
    vector = ir.Constant(vector_type, ir.Undefined)
    for i, value in enumerate(values):
        vector = builder.insert_element(vector, value, I32(i))
    run = vector_type.count // len(values)
    mask = ir.Constant(ir.VectorType(I32, vector_type.count), [i // run for i in range(vector_type.count)])
    return builder.shuffle_vector(vector, ir.Constant(vector_type, ir.Undefined), mask)


def concat(builder, first, second):
    mask = ir.Constant(ir.VectorType(I32, 2 * first.type.count), list(range(2 * first.type.count)))
    return builder.shuffle_vector(first, second, mask)


def data_pointer(context, builder, array_type, array, element_type):
    """An element_type pointer to the first element of a numba array."""
    return builder.bitcast(context.make_array(array_type)(context, builder, array).data, element_type.as_pointer())


def is_contiguous_1d(array_type, dtypes) -> bool:
    """Whether a numba type is a 1-D C-contiguous array of one of dtypes (typing check of an intrinsic)."""
    return isinstance(array_type, types.Array) and array_type.ndim == 1 and array_type.layout == "C" \
        and array_type.dtype in dtypes


def row_pointer(context, builder, array_type, array, row):
    """A byte pointer to row `row` of a 2-D array (strides are in bytes)."""
    ary = context.make_array(array_type)(context, builder, array)
    data = builder.bitcast(ary.data, I8.as_pointer())
    return builder.gep(data, [builder.mul(row, builder.extract_value(ary.strides, 0))])


def lane_total(builder, lanes):
    """The 16 lanes' sum, as a tree (the same order for every call)."""
    count = lanes.type.count
    while count > 1:
        count //= 2
        low = builder.shuffle_vector(lanes, lanes, ir.Constant(ir.VectorType(I32, count), list(range(count))))
        high = builder.shuffle_vector(lanes, lanes, ir.Constant(ir.VectorType(I32, count),
                                                                list(range(count, 2 * count))))
        lanes = builder.fadd(low, high)
    return builder.extract_element(lanes, I32(0))


def lane_totals(builder, vectors):
    """[lane_total(v) for v in vectors], the same tree, bit for bit, with the vectors' lanes packed together: at
    each level two vectors' halves share one add (a power-of-two count of up to 16 vectors of 16 lanes, ~3 ops a
    vector instead of 8)."""
    count = len(vectors)
    if count == 1 or count & (count - 1) or count > 16 or any(v.type.count != 16 for v in vectors):
        return [lane_total(builder, v) for v in vectors]
    width = 16  # lanes a vector's partial sums span; packed[i] holds 16 // width vectors' partials side by side
    packed = list(vectors)
    while width > 1:
        half = width // 2
        segments = 16 // width  # vectors per packed vector
        merged = []
        for a, b in zip(packed[0::2], packed[1::2]) if len(packed) > 1 else [(packed[0], packed[0])]:
            # lane i of the result: segment s of a (s < segments) or of b, low or high half, lane j of the half
            low = [(0 if s < segments else 16) + (s % segments) * width + j for s in range(2 * segments)
                   for j in range(half)]
            high = [index + half for index in low]
            lanes = ir.VectorType(I32, 16)
            merged.append(builder.fadd(builder.shuffle_vector(a, b, ir.Constant(lanes, low)),
                                       builder.shuffle_vector(a, b, ir.Constant(lanes, high))))
        packed, width = merged, half
    totals = []  # the packed vectors now hold the totals in order (a lone one repeats them past `count`)
    for vector in packed:
        totals += [builder.extract_element(vector, I32(i)) for i in range(16)]
    return totals[:count]


def memory_barrier(builder):
    """An empty asm that may touch any memory: loads after it are not merged with loads before it, so a value
    read from memory again is not kept in a register across it (the loads fold into their users)."""
    builder.asm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", [], side_effect=True)
