"""Lane accumulators that live on the stack, and their sum as one vector reduction.

A dot kernel accumulates `lanes[j] += scale * q[j] * x[j]` over blocks. When `lanes` was a heap array passed
in, LLVM could not prove it does not alias x or the weights, so every block loaded and stored every lane
(measured: 1.3x slower). An alloca'd array aliases nothing: SROA turns it into SIMD registers. `lane_sum`
reduces lanes with `llvm.vector.reduce.fadd` (a log-depth shuffle tree); a scalar loop with reassociation
became a serial chain of 31 dependent adds per row.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_LANES_TYPE = types.Array(types.float32, 1, "C")


@intrinsic
def zeroed_lanes(typingctx, count):
    """A float32 array of `count` (a compile-time constant) zeros on the stack; valid until the function returns."""
    if not isinstance(count, types.IntegerLiteral):
        return None
    length = count.literal_value

    def codegen(context, builder, signature, args):
        pointer = cgutils.alloca_once(builder, ir.FloatType(), size=length)  # in the entry block: once per call
        cgutils.memset(builder, pointer, ir.Constant(ir.IntType(64), 4 * length), 0)
        lanes = context.make_array(_LANES_TYPE)(context, builder)
        itemsize = context.get_constant(types.intp, 4)
        context.populate_array(lanes, data=pointer, shape=[context.get_constant(types.intp, length)],
                               strides=[itemsize], itemsize=itemsize, meminfo=None)
        return lanes._getvalue()

    return _LANES_TYPE(count), codegen


@intrinsic
def lane_sum(typingctx, lanes, first, count):
    """lanes[first] + ... + lanes[first + count - 1] (count a compile-time constant), in any order."""
    if not isinstance(count, types.IntegerLiteral) or lanes != _LANES_TYPE:
        return None
    length = count.literal_value

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        vector_type = ir.VectorType(ir.FloatType(), length)
        pointer = builder.bitcast(builder.gep(array.data, [args[1]]), vector_type.as_pointer())
        reduce = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.FloatType(), [ir.FloatType(), vector_type]),
            f"llvm.vector.reduce.fadd.v{length}f32")
        return builder.call(reduce, [ir.Constant(ir.FloatType(), 0.0), builder.load(pointer, align=4)],
                            fastmath=("reassoc", "nsz"))

    return types.float32(lanes, types.intp, count), codegen
