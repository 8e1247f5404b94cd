"""One 32-value block of a register tile: acc[t, r] += w[r] . x[t] in 16-wide vectors (the batched mat-vec core).

numba runs LLVM's loop vectoriser only, and on AVX-512 CPUs that LLVM tunes for 256-bit vectors: the same FMAs
written as numba loops came out as ymm code with spilled accumulators (LM head, 4 tokens, one thread: 50 ms vs
35 ms with this intrinsic; a plain 4x4 FMA tile in L1 ran at 29 GMAC/s in ymm, 62 in zmm). So the tile is
emitted as <16 x float> IR: LLVM lowers it to zmm FMAs with AVX-512, to pairs of ymm with AVX2, and to SSE
otherwise. The accumulators are a stack array (lanes.zeroed_lanes) that is only ever touched by whole-vector
loads and stores at constant offsets, so SROA keeps the whole tile in registers across blocks.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

VECTOR_WIDTH = 16  # float32 lanes per accumulator: one zmm register
BLOCK_VALUES = 2 * VECTOR_WIDTH  # values of one decoded block per row (the low and the high half)
_F32_VECTOR = ir.VectorType(ir.FloatType(), VECTOR_WIDTH)
_LANES_TYPE = types.Array(types.float32, 1, "C")


def _vector_at(builder, base_pointer, index):
    return builder.bitcast(builder.gep(base_pointer, [index]), _F32_VECTOR.as_pointer())


def _is_float32_matrix(x) -> bool:
    return isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" and x.dtype == types.float32


@intrinsic
def fma_block_tile(typingctx, acc, w, x, tokens, first, num_rows):
    """acc[16 (t R + r) + i] += w[32 r + i] x[tokens[t], first + i] + w[32 r + 16 + i] x[tokens[t], first + 16 + i]
    for i < 16, rows r < num_rows (a literal R), tokens t < len(tokens) (a tuple of x row indices).

    acc: float32 [16 R T] stack lanes; w: float32 [32 R], one decoded 32-value block per row; x: float32 [n, k]
    C-contiguous (first + 32 <= k, unchecked).
    """
    if not (isinstance(num_rows, types.IntegerLiteral) and isinstance(tokens, types.UniTuple)
            and isinstance(tokens.dtype, types.Integer) and acc == _LANES_TYPE and w == _LANES_TYPE
            and _is_float32_matrix(x) and isinstance(first, types.Integer)):
        return None
    rows_count, tokens_count = num_rows.literal_value, tokens.count

    def codegen(context, builder, signature, args):
        acc_array, w_array, x_array = (context.make_array(signature.args[i])(context, builder, args[i])
                                       for i in range(3))
        intp = context.get_value_type(types.intp)
        index = lambda value: builder.sext(value, intp) if value.type.width < intp.width else value  # noqa: E731
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_F32_VECTOR, [_F32_VECTOR] * 3), "llvm.fmuladd.v16f32")
        weights = [[builder.load(_vector_at(builder, w_array.data, intp(BLOCK_VALUES * r + VECTOR_WIDTH * half)),
                                 align=4) for half in range(2)] for r in range(rows_count)]
        row_length = builder.extract_value(x_array.shape, 1)
        for t, token in enumerate(cgutils.unpack_tuple(builder, args[3])):
            start = builder.add(builder.mul(index(token), row_length), index(args[4]))
            xs = [builder.load(_vector_at(builder, x_array.data, builder.add(start, intp(VECTOR_WIDTH * half))),
                               align=4) for half in range(2)]
            for r in range(rows_count):
                pointer = _vector_at(builder, acc_array.data, intp(VECTOR_WIDTH * (t * rows_count + r)))
                total = builder.load(pointer, align=4)
                for half in range(2):
                    total = builder.call(fma, [weights[r][half], xs[half], total])
                builder.store(total, pointer, align=4)
        return context.get_dummy_value()

    return types.void(acc, w, x, tokens, first, num_rows), codegen
