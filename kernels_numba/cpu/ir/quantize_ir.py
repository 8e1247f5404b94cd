"""One 32-value block of activations quantized to 8 bits as vector IR (int8_dot.quantize_activations_into).

block_abs_max_bits: max |value| of the block taken on the float bits; quantize_block_into: quants = rint(values *
inverse) as int8 (round half to even, as np.rint), their sums by 4 (the dots' lane sums) and the block's total;
quantize_block_scattered: the same quants written as 8 int32 words to given places (the run layout's activations,
run_matvec.quantized_run_activations) and the sums of the block's two halves. As numba code a block cost ~40 ns
(a view of the block made and freed, a vmulss and a cvtss2si a value); all read a row array in place.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels_numba.cpu.ir.vector_ir import I8, I32, I64, data_pointer, is_contiguous_1d, load_vector

BLOCK_VALUES = 32
LANE_VALUES = 4
_F32 = ir.FloatType()
_FLOATS = ir.VectorType(_F32, BLOCK_VALUES)
_INTS = ir.VectorType(I32, BLOCK_VALUES)
_BYTES = ir.VectorType(I8, BLOCK_VALUES)
_LANES = ir.VectorType(I32, BLOCK_VALUES // LANE_VALUES)
ABS_BITS = 0x7FFFFFFF  # a float's bits less its sign


@intrinsic
def block_abs_max_bits(typingctx, values, first):
    """max over j < 32 of bits(values[first + j]) & 0x7fffffff (int32): for finite floats |a| < |b| exactly when
    their bits so compare; an inf or NaN gives >= 0x7f800000. values: 1-D contiguous float32, unchecked bounds."""
    if not (is_contiguous_1d(values, (types.float32,)) and isinstance(first, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        start = context.cast(builder, args[1], signature.args[1], types.int64)
        block = builder.gep(data_pointer(context, builder, signature.args[0], args[0], _F32), [start])
        bits = builder.and_(load_vector(builder, block, _INTS, align=4),
                            ir.Constant(_INTS, [ABS_BITS] * BLOCK_VALUES))
        reduce_max = cgutils.get_or_insert_function(builder.module, ir.FunctionType(I32, [_INTS]),
                                                    "llvm.vector.reduce.smax.v32i32")
        return builder.call(reduce_max, [bits])

    return types.int32(values, first), codegen


def _block_quants(builder, values_arg, values_type, start, inverse, context):
    """<32 x i8>: int8(rint(values[start + j] * inverse)) (fptosi, then the low byte: as the CPU converts a NaN)."""
    return builder.trunc(_block_ints(builder, values_arg, values_type, start, inverse, context), _BYTES)


def _block_ints(builder, values_arg, values_type, start, inverse, context):
    """<32 x i32>: rint(values[start + j] * inverse) converted to int32."""
    block = builder.gep(data_pointer(context, builder, values_type, values_arg, _F32), [start])
    loaded = load_vector(builder, block, _FLOATS, align=4)
    splat = builder.shuffle_vector(builder.insert_element(ir.Constant(_FLOATS, ir.Undefined), inverse, I32(0)),
                                   ir.Constant(_FLOATS, ir.Undefined), ir.Constant(_INTS, [0] * BLOCK_VALUES))
    rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_FLOATS, [_FLOATS]), "llvm.rint.v32f32")
    return builder.fptosi(builder.call(rint, [builder.fmul(loaded, splat)]), _INTS)


@intrinsic
def quantize_block_into(typingctx, values, first, inverse, quants, lane_sums):
    """quants[first + j] = int8(rint(values[first + j] * inverse)) for j < 32, lane_sums[first / 4 + i] = the sum of
    quants first + 4i .. first + 4i + 3; returns the 32 quants' sum (int32). values float32, quants int8, lane_sums
    int32: 1-D contiguous arrays, unchecked bounds."""
    if not (is_contiguous_1d(values, (types.float32,)) and is_contiguous_1d(quants, (types.int8,))
            and is_contiguous_1d(lane_sums, (types.int32,)) and isinstance(first, types.Integer)
            and isinstance(inverse, types.Float)):
        return None

    def codegen(context, builder, signature, args):
        values_arg, first_arg, inverse_arg, quants_arg, sums_arg = args
        start = context.cast(builder, first_arg, signature.args[1], types.int64)
        scale = context.cast(builder, inverse_arg, signature.args[2], types.float32)
        quant_bytes = _block_quants(builder, values_arg, signature.args[0], start, scale, context)
        out = builder.gep(data_pointer(context, builder, signature.args[3], quants_arg, I8), [start])
        builder.store(quant_bytes, builder.bitcast(out, _BYTES.as_pointer()), align=1)
        ints = builder.sext(quant_bytes, _INTS)  # the sums of the stored quants (a NaN's conversion included)
        parts = [builder.shuffle_vector(ints, ints, ir.Constant(_LANES, [LANE_VALUES * lane + j
                                                                          for lane in range(_LANES.count)]))
                 for j in range(LANE_VALUES)]
        lanes = builder.add(builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3]))
        lane_start = builder.udiv(start, ir.Constant(start.type, LANE_VALUES))
        sums_out = builder.gep(data_pointer(context, builder, signature.args[4], sums_arg, I32), [lane_start])
        builder.store(lanes, builder.bitcast(sums_out, _LANES.as_pointer()), align=4)
        total = builder.extract_element(lanes, I32(0))
        for lane in range(1, _LANES.count):
            total = builder.add(total, builder.extract_element(lanes, I32(lane)))
        return total

    return types.int32(values, first, inverse, quants, lane_sums), codegen


_HALF_INTS = ir.VectorType(I32, BLOCK_VALUES // 2)


@intrinsic
def quantize_block_scattered(typingctx, values, first, inverse, words, base, offsets):
    """The quants of quantize_block_into for a block of finite values (the same bytes) as 8 int32 words, word i
    (quants 4i..4i+3) stored at words[base + offsets[i]]; returns the sums of quants 0..15 and 16..31 (int32 each).
    The quants are clamped to int8 (a saturating pack, which rounding in range never reaches) and summed as
    int32s before packing. values float32, words int32, offsets int64 (8): 1-D contiguous arrays, unchecked
    bounds; a block with an inf or NaN is the caller's (every quant 0 in quantize_block_into)."""
    if not (is_contiguous_1d(values, (types.float32,)) and is_contiguous_1d(words, (types.int32,))
            and is_contiguous_1d(offsets, (types.int64,)) and isinstance(first, types.Integer)
            and isinstance(base, types.Integer) and isinstance(inverse, types.Float)):
        return None
    result_type = types.UniTuple(types.int32, 2)

    def codegen(context, builder, signature, args):
        values_arg, first_arg, inverse_arg, words_arg, base_arg, offsets_arg = args
        start = context.cast(builder, first_arg, signature.args[1], types.int64)
        inverse_value = context.cast(builder, inverse_arg, signature.args[2], types.float32)
        ints = _block_ints(builder, values_arg, signature.args[0], start, inverse_value, context)
        reduce_add = cgutils.get_or_insert_function(builder.module, ir.FunctionType(I32, [_HALF_INTS]),
                                                    "llvm.vector.reduce.add.v16i32")
        halves = [builder.call(reduce_add, [builder.shuffle_vector(
            ints, ints, ir.Constant(_HALF_INTS, list(range(h * _HALF_INTS.count, (h + 1) * _HALF_INTS.count))))])
            for h in range(2)]
        clamped = _int_call(builder, "smax", _int_call(builder, "smin", ints, 127), -128)
        packed = builder.bitcast(builder.trunc(clamped, _BYTES), _LANES)  # word i: quants 4i..4i+3
        base_value = context.cast(builder, base_arg, signature.args[4], types.int64)
        offsets_at = data_pointer(context, builder, signature.args[5], offsets_arg, I64)
        words_at = data_pointer(context, builder, signature.args[3], words_arg, I32)
        for i in range(_LANES.count):
            place = builder.add(base_value, builder.load(builder.gep(offsets_at, [I64(i)]), align=8))
            builder.store(builder.extract_element(packed, I32(i)), builder.gep(words_at, [place]), align=4)
        return context.make_tuple(builder, result_type, halves)

    return result_type(values, first, inverse, words, base, offsets), codegen


def _int_call(builder, name, ints, bound):
    """llvm.<name> (smin, smax) of an int32 vector and a splat bound."""
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_INTS, [_INTS, _INTS]),
                                              f"llvm.{name}.v32i32")
    return builder.call(function, [ints, ir.Constant(_INTS, [bound] * BLOCK_VALUES)])
