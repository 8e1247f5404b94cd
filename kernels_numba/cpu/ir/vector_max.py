"""The largest value of a 1-D float array, NaN ignored, as vector IR (softmax_draw.row_max of a vocabulary row).

Four 512-bit running maxima (llvm.maxnum: a NaN operand gives the other) over whole chunks of 4 vectors, then one
reduction; the chunks' tail is left to the caller. Written as numba code the eight scalar running maxima of the
old row_max took ~55 us for Gemma 3's 262144 logits, about a fifth of a token's draw.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels_numba.cpu.ir.vector_ir import I64, data_pointer, is_contiguous_1d, load_vector

VECTOR_BYTES = 64
NUM_ACCUMULATORS = 4


def chunk_values(dtype) -> int:
    """Values per chunk (4 vectors) of a float32 or float64 array."""
    return NUM_ACCUMULATORS * VECTOR_BYTES // (4 if dtype == types.float32 else 8)


@intrinsic
def chunked_max(typingctx, values):
    """(the largest of values[:num_full], num_full) with num_full the values in whole chunks; -inf when none.
    values: 1-D contiguous float32 or float64."""
    if not is_contiguous_1d(values, (types.float32, types.float64)):
        return None
    dtype = values.dtype
    per_chunk = chunk_values(dtype)

    def codegen(context, builder, signature, args):
        element = context.get_value_type(dtype)
        lanes = ir.VectorType(element, per_chunk // NUM_ACCUMULATORS)
        suffix = f"v{lanes.count}{'f32' if dtype == types.float32 else 'f64'}"
        maxnum = cgutils.get_or_insert_function(builder.module, ir.FunctionType(lanes, [lanes, lanes]),
                                                f"llvm.maxnum.{suffix}")
        reduce_max = cgutils.get_or_insert_function(builder.module, ir.FunctionType(element, [lanes]),
                                                    f"llvm.vector.reduce.fmax.{suffix}")
        data = data_pointer(context, builder, signature.args[0], args[0], element)
        size = builder.extract_value(context.make_array(signature.args[0])(context, builder, args[0]).shape, 0)
        num_chunks = builder.udiv(size, I64(per_chunk))
        minus_inf = ir.Constant(lanes, [float("-inf")] * lanes.count)
        accumulators = [cgutils.alloca_once_value(builder, minus_inf) for _ in range(NUM_ACCUMULATORS)]
        with cgutils.for_range(builder, num_chunks) as loop:
            chunk = builder.gep(data, [builder.mul(loop.index, I64(per_chunk))])
            for a, accumulator in enumerate(accumulators):
                vector = load_vector(builder, builder.gep(chunk, [I64(a * lanes.count)]), lanes,
                                     align=dtype.bitwidth // 8)
                builder.store(builder.call(maxnum, [builder.load(accumulator), vector]), accumulator)
        loaded = [builder.load(accumulator) for accumulator in accumulators]
        combined = builder.call(maxnum, [builder.call(maxnum, loaded[:2]), builder.call(maxnum, loaded[2:])])
        largest = builder.call(reduce_max, [combined])
        return context.make_tuple(builder, signature.return_type,
                                  [largest, builder.mul(num_chunks, I64(per_chunk))])

    return types.Tuple((dtype, types.int64))(values), codegen
