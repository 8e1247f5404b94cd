"""Dot products of quantized rows with 8-bit activations (int8 x int8 sums in integer SIMD), as llama.cpp does.

The float kernels (block_dot.py) turn every weight into float32 before the FMA, so on this CPU they run at
2.5-5 GB/s per core, compute-bound, while a core streams ~12 GB/s. Here the activation vector is quantized once
per call, 32 values to a block with one float scale (like llama.cpp's Q8_0 activations), and each weight block's
integer dot with it is one VNNI `vpdpbusd` (32 byte products summed into 8 int32 lanes), then one float FMA
with the two block scales. numba cannot emit VNNI itself, so the row loop is written as LLVM IR (numba
`intrinsic`); on a CPU without AVX512-VNNI the same IR uses plain widening multiplies instead (slower, same
integers, same result).

vpdpbusd multiplies unsigned by signed bytes. The weight quants are made unsigned: Q5_0 and Q4_0 store q in
0..31 / 0..15 for the value q - 16 / q - 8 already, Q8_0's signed bytes are flipped to w + 128 (an xor of the sign
bit). The activation quants stay signed, and the lanes start from -zero_point * (the sum of the four activation
quants of each lane, computed once per vector: `x_lane_sums`), so the lane totals are exactly sum(value * x).

Software prefetch ~10 KiB ahead in the row stream doubled the single-core rate (24 -> 14 ms for the 178 MB
Gemma 3 LM head; the hardware prefetcher alone kept too few lines in flight).

Numbers: the result differs from the exact float dot by the activation rounding (each value within half a step
of its block's max/127), the same order as llama.cpp's own logits vs fp32 math.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.registry import cpu_target
from numba.extending import intrinsic

BLOCK_VALUES = 32  # activation values per scale (and Q8_0 weight values per block)
LANE_VALUES = 4  # activation quants summed into one int32 lane by vpdpbusd
PREFETCH_BYTES = 10 * 1024  # measured: 2.7 KiB 15.2 ms, 10.6 KiB 14.0 ms, 21 KiB 15.2 ms, 42 KiB 17.6 ms

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F32 = ir.FloatType()
_BYTES16 = ir.VectorType(_I8, 16)
_BYTES32 = ir.VectorType(_I8, 32)
_LANES = ir.VectorType(_I32, 8)
_FLOAT_LANES = ir.VectorType(_F32, 8)


def host_has_vnni(context) -> bool:
    """Whether numba compiles for a CPU with 256-bit AVX512-VNNI (the features of numba's target machine, so
    NUMBA_CPU_NAME/NUMBA_CPU_FEATURES are honoured)."""
    features = context.codegen()._tm_features.split(",")
    return "+avx512vnni" in features and "+avx512vl" in features


INT8_DOT_IS_FAST = host_has_vnni(cpu_target.target_context)


def _dot_lanes_vnni(builder, acc, unsigned_bytes, signed_bytes):
    function_type = ir.FunctionType(_LANES, [_LANES, _LANES, _LANES])
    vpdpbusd = cgutils.get_or_insert_function(builder.module, function_type, "llvm.x86.avx512.vpdpbusd.256")
    return builder.call(vpdpbusd, [acc, builder.bitcast(unsigned_bytes, _LANES), builder.bitcast(signed_bytes, _LANES)])


def _dot_lanes_portable(builder, acc, unsigned_bytes, signed_bytes):
    """vpdpbusd in plain IR: lane i += sum of u[4i+j] * s[4i+j], j < 4 (any CPU; LLVM picks the instructions)."""
    wide = ir.VectorType(_I32, 32)
    products = builder.mul(builder.zext(unsigned_bytes, wide), builder.sext(signed_bytes, wide))
    for j in range(LANE_VALUES):
        pick = ir.Constant(ir.VectorType(_I32, 8), [LANE_VALUES * i + j for i in range(8)])
        acc = builder.add(acc, builder.shuffle_vector(products, ir.Constant(wide, ir.Undefined), pick))
    return acc


def _splat(builder, value):
    vector = builder.insert_element(ir.Constant(_FLOAT_LANES, ir.Undefined), value, _I32(0))
    return builder.shuffle_vector(vector, ir.Constant(_FLOAT_LANES, ir.Undefined), ir.Constant(_LANES, [0] * 8))


def _load(builder, pointer, vector_type, align=1):
    return builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=align)


def _prefetch(builder, pointer):
    byte_pointer = _I8.as_pointer()
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, _I32, _I32, _I32]), "llvm.prefetch.p0i8")
    builder.call(function, [pointer, _I32(0), _I32(3), _I32(1)])  # read, keep in all cache levels, data


def _lane_total(builder, lanes):
    total = builder.extract_element(lanes, _I32(0))
    for i in range(1, 8):
        total = builder.fadd(total, builder.extract_element(lanes, _I32(i)))
    return total


def _row_pointer(context, builder, array_type, array, row):
    """A byte pointer to row `row` of a 2-D array (strides are in bytes)."""
    ary = context.make_array(array_type)(context, builder, array)
    data = builder.bitcast(ary.data, _I8.as_pointer())
    return builder.gep(data, [builder.mul(row, builder.extract_value(ary.strides, 0))])


def _nibbles(builder, pointer):
    """16 bytes of packed nibbles -> <32 x i8>: the low nibbles (values 0-15), then the high ones (16-31)."""
    packed = _load(builder, pointer, _BYTES16)
    low = builder.and_(packed, ir.Constant(_BYTES16, [0x0F] * 16))
    high = builder.lshr(packed, ir.Constant(_BYTES16, [4] * 16))
    return builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))


def _unpack_q8_0(builder, block):
    """d f16 | 32 int8: the quants + 128 as unsigned bytes (an xor of the sign bit)."""
    return builder.xor(_load(builder, builder.gep(block, [_I64(2)]), _BYTES32), ir.Constant(_BYTES32, [0x80] * 32))


def _unpack_q4_0(builder, block):
    """d f16 | 16 bytes of nibbles: quants 0..15 (value q - 8)."""
    return _nibbles(builder, builder.gep(block, [_I64(2)]))


def _unpack_q5_0(builder, block):
    """d f16 | qh u32 (bit j: the fifth bit of value j) | 16 bytes of nibbles: quants 0..31 (value q - 16)."""
    high_bits = builder.load(builder.bitcast(builder.gep(block, [_I64(2)]), _I32.as_pointer()), align=1)
    fifth_bit = builder.bitcast(high_bits, ir.VectorType(ir.IntType(1), 32))
    sixteens = builder.select(fifth_bit, ir.Constant(_BYTES32, [16] * 32), ir.Constant(_BYTES32, [0] * 32))
    return builder.or_(_nibbles(builder, builder.gep(block, [_I64(6)])), sixteens)


@dataclass(frozen=True)
class BlockFormat:
    """A weight type with 32 values per block, one f16 scale first, and values d * (q - zero_point), q unsigned."""
    block_bytes: int
    zero_point: int  # subtracted from the unsigned quants: the lanes start from -zero_point * sum(x quants)
    unpack: Callable  # (builder, block pointer) -> <32 x i8> unsigned quants in the order of x


BLOCK_FORMATS = {"Q8_0": BlockFormat(34, 128, _unpack_q8_0), "Q5_0": BlockFormat(22, 16, _unpack_q5_0),
                 "Q4_0": BlockFormat(18, 8, _unpack_q4_0)}


def _emit_dot4(block_format, dot_lanes, context, builder, signature, args):
    """The IR of a dot4: one loop over the blocks, four rows' float lanes in registers (allocas LLVM promotes)."""
    arg_types = signature.args
    data, rows, (x_quants, x_scales, x_lane_sums, token, prefetch_bytes) = args[0], args[1:5], args[5:]
    row_pointers = [_row_pointer(context, builder, arg_types[0], data, row) for row in rows]
    quants = _row_pointer(context, builder, arg_types[5], x_quants, token)
    scales = builder.bitcast(_row_pointer(context, builder, arg_types[6], x_scales, token), _F32.as_pointer())
    lane_sums = builder.bitcast(_row_pointer(context, builder, arg_types[7], x_lane_sums, token), _I32.as_pointer())
    row_length = builder.extract_value(context.make_array(arg_types[5])(context, builder, x_quants).shape, 1)
    accumulators = [cgutils.alloca_once_value(builder, ir.Constant(_FLOAT_LANES, None)) for _ in rows]
    with cgutils.for_range(builder, builder.udiv(row_length, _I64(BLOCK_VALUES))) as loop:
        block = loop.index
        x_block = _load(builder, builder.gep(quants, [builder.mul(block, _I64(BLOCK_VALUES))]), _BYTES32)
        sums = _load(builder, builder.gep(lane_sums, [builder.mul(block, _I64(8))]), _LANES, align=4)
        start = builder.mul(sums, ir.Constant(_LANES, [-block_format.zero_point] * 8))
        x_scale = builder.load(builder.gep(scales, [block]))
        for row_pointer, accumulator in zip(row_pointers, accumulators):
            base = builder.gep(row_pointer, [builder.mul(block, _I64(block_format.block_bytes))])
            _prefetch(builder, builder.gep(base, [prefetch_bytes]))
            half_pointer = builder.bitcast(base, ir.HalfType().as_pointer())
            w_scale = builder.fpext(builder.load(half_pointer, align=1), _F32)
            w_quants = block_format.unpack(builder, base)
            lanes = builder.sitofp(dot_lanes(builder, start, w_quants, x_block), _FLOAT_LANES)
            scaled = builder.fmul(lanes, _splat(builder, builder.fmul(w_scale, x_scale)), flags=["contract"])
            builder.store(builder.fadd(builder.load(accumulator), scaled, flags=["contract"]), accumulator)
    totals = [_lane_total(builder, builder.load(accumulator)) for accumulator in accumulators]
    return context.make_tuple(builder, signature.return_type, totals)


def _dot4_intrinsic(block_format, choose_dot_lanes):
    """A dot4 of `block_format` rows with the lane dot that choose_dot_lanes(context) picks at compile time."""
    @intrinsic
    def dot4(typingctx, data, ra, rb, rc, rd, x_quants, x_scales, x_lane_sums, token, prefetch_bytes):
        """(dot(row ra, x), ..., dot(row rd, x)) of rows of data (uint8 [rows, bytes]) with token `token` of the
        8-bit activations (quantize_activations_into); rows may repeat. prefetch_bytes: how far ahead in each
        row's stream to prefetch (0: nothing new, e.g. a later token over the same rows)."""
        if not (isinstance(data, types.Array) and data.ndim == 2):
            return None

        def codegen(context, builder, signature, args):
            return _emit_dot4(block_format, choose_dot_lanes(context), context, builder, signature, args)

        result_type = types.UniTuple(types.float32, 4)
        return result_type(data, ra, rb, rc, rd, x_quants, x_scales, x_lane_sums, token, prefetch_bytes), codegen

    return dot4


SUPER_BLOCK_VALUES = 256  # K-quants: eight runs of 32 values share one super-block header


def _byte(builder, pointer, offset):
    return builder.zext(builder.load(builder.gep(pointer, [_I64(offset)])), _I32)


def _q6_k_groups(builder, block):
    """Q6_K super-block (ql[128] low 4 bits | qh[64] high 2 bits | 16 int8 scales | d f16): for each run of 32
    values, (unsigned 6-bit quants, their 8 lanes' scales without the x scale, None): value d * sc * (q - 32),
    one scale per 16 values (lanes 0-3 and 4-7)."""
    d = builder.fpext(builder.load(builder.bitcast(builder.gep(block, [_I64(208)]), ir.HalfType().as_pointer()),
                                   align=1), _F32)
    scales = builder.sitofp(_load(builder, builder.gep(block, [_I64(192)]), _BYTES16), ir.VectorType(_F32, 16))
    scales = builder.fmul(scales, builder.shuffle_vector(
        builder.insert_element(ir.Constant(ir.VectorType(_F32, 16), ir.Undefined), d, _I32(0)),
        ir.Constant(ir.VectorType(_F32, 16), ir.Undefined), ir.Constant(ir.VectorType(_I32, 16), [0] * 16)))
    low_mask, two_bits = ir.Constant(_BYTES32, [0x0F] * 32), ir.Constant(_BYTES32, [3] * 32)
    groups = []
    for half in range(2):
        low_first = _load(builder, builder.gep(block, [_I64(64 * half)]), _BYTES32)
        low_second = _load(builder, builder.gep(block, [_I64(64 * half + 32)]), _BYTES32)
        high = _load(builder, builder.gep(block, [_I64(128 + 32 * half)]), _BYTES32)
        nibbles = (builder.and_(low_first, low_mask), builder.and_(low_second, low_mask),
                   builder.lshr(low_first, ir.Constant(_BYTES32, [4] * 32)),
                   builder.lshr(low_second, ir.Constant(_BYTES32, [4] * 32)))
        for run in range(4):
            high_bits = builder.and_(builder.lshr(high, ir.Constant(_BYTES32, [2 * run] * 32)), two_bits)
            quants = builder.or_(nibbles[run], builder.shl(high_bits, ir.Constant(_BYTES32, [4] * 32)))
            first_scale = 8 * half + 2 * run
            lane_scales = builder.shuffle_vector(scales, ir.Constant(ir.VectorType(_F32, 16), ir.Undefined),
                                                 ir.Constant(_LANES, [first_scale] * 4 + [first_scale + 1] * 4))
            groups.append((quants, lane_scales, None))
    return groups


def _q4_k_scale_and_min(builder, block, run):
    """The 6-bit scale and min of run 0..7 from the 12 packed bytes at offset 4 (ggml's get_scale_min_k4)."""
    if run < 4:
        scale = builder.and_(_byte(builder, block, 4 + run), _I32(63))
        minimum = builder.and_(_byte(builder, block, 8 + run), _I32(63))
    else:
        extra = _byte(builder, block, 8 + run)
        scale = builder.or_(builder.and_(extra, _I32(15)),
                            builder.shl(builder.lshr(_byte(builder, block, run), _I32(6)), _I32(4)))
        minimum = builder.or_(builder.lshr(extra, _I32(4)),
                              builder.shl(builder.lshr(_byte(builder, block, 4 + run), _I32(6)), _I32(4)))
    return builder.uitofp(scale, _F32), builder.uitofp(minimum, _F32)


def _q4_k_groups(builder, block):
    """Q4_K super-block (d f16 | dmin f16 | 12 bytes of 6-bit scales and mins | 128 bytes of nibbles: runs 2c and
    2c+1 in the low and high nibbles of chunk c): value d * sc * q - dmin * m."""
    halves = builder.bitcast(block, ir.HalfType().as_pointer())
    d = builder.fpext(builder.load(halves, align=1), _F32)
    d_min = builder.fpext(builder.load(builder.gep(halves, [_I64(1)]), align=1), _F32)
    groups = []
    for chunk in range(4):
        packed = _load(builder, builder.gep(block, [_I64(16 + 32 * chunk)]), _BYTES32)
        for run, quants in ((2 * chunk, builder.and_(packed, ir.Constant(_BYTES32, [0x0F] * 32))),
                            (2 * chunk + 1, builder.lshr(packed, ir.Constant(_BYTES32, [4] * 32)))):
            scale, minimum = _q4_k_scale_and_min(builder, block, run)
            groups.append((quants, _splat(builder, builder.fmul(d, scale)), builder.fmul(d_min, minimum)))
    return groups


@dataclass(frozen=True)
class SuperBlockFormat:
    """A K-quant: 256 values per super-block in 8 runs of 32, each run with its own scale (and min)."""
    block_bytes: int
    zero_point: int
    groups: Callable  # (builder, super-block pointer) -> 8 x (unsigned quants, lane scales, min factor or None)


SUPER_BLOCK_FORMATS = {"Q6_K": SuperBlockFormat(210, 32, _q6_k_groups), "Q4_K": SuperBlockFormat(144, 0, _q4_k_groups)}


def _emit_super_block_dot4(block_format, dot_lanes, context, builder, signature, args):
    """The IR of a K-quant dot4: per super-block, the x blocks of its 8 runs are loaded once for the four rows;
    a run's integer dot is scaled by its lane scales times the x scale; mins subtract min * (sum of x's run)."""
    arg_types = signature.args
    data, rows = args[0], args[1:5]
    x_quants, x_scales, x_lane_sums, x_block_sums, token, prefetch_bytes = args[5:]
    row_pointers = [_row_pointer(context, builder, arg_types[0], data, row) for row in rows]
    quants = _row_pointer(context, builder, arg_types[5], x_quants, token)
    scales = builder.bitcast(_row_pointer(context, builder, arg_types[6], x_scales, token), _F32.as_pointer())
    lane_sums = builder.bitcast(_row_pointer(context, builder, arg_types[7], x_lane_sums, token), _I32.as_pointer())
    block_sums = builder.bitcast(_row_pointer(context, builder, arg_types[8], x_block_sums, token), _F32.as_pointer())
    row_length = builder.extract_value(context.make_array(arg_types[5])(context, builder, x_quants).shape, 1)
    accumulators = [cgutils.alloca_once_value(builder, ir.Constant(_FLOAT_LANES, None)) for _ in rows]
    min_totals = [cgutils.alloca_once_value(builder, ir.Constant(_F32, 0.0)) for _ in rows]
    runs = SUPER_BLOCK_VALUES // BLOCK_VALUES
    with cgutils.for_range(builder, builder.udiv(row_length, _I64(SUPER_BLOCK_VALUES))) as loop:
        first_x_block = builder.mul(loop.index, _I64(runs))
        x_runs = []
        for run in range(runs):
            x_block = builder.add(first_x_block, _I64(run))
            x_values = _load(builder, builder.gep(quants, [builder.mul(x_block, _I64(BLOCK_VALUES))]), _BYTES32)
            start = ir.Constant(_LANES, None)
            if block_format.zero_point:
                sums = _load(builder, builder.gep(lane_sums, [builder.mul(x_block, _I64(8))]), _LANES, align=4)
                start = builder.mul(sums, ir.Constant(_LANES, [-block_format.zero_point] * 8))
            x_runs.append((x_values, start, builder.load(builder.gep(scales, [x_block])),
                           builder.load(builder.gep(block_sums, [x_block]))))
        for row_pointer, accumulator, min_total in zip(row_pointers, accumulators, min_totals):
            base = builder.gep(row_pointer, [builder.mul(loop.index, _I64(block_format.block_bytes))])
            _prefetch(builder, builder.gep(base, [prefetch_bytes]))
            for (w_quants, lane_scales, min_factor), (x_values, start, x_scale, x_sum) in zip(
                    block_format.groups(builder, base), x_runs):
                lanes = builder.sitofp(dot_lanes(builder, start, w_quants, x_values), _FLOAT_LANES)
                scaled = builder.fmul(lanes, builder.fmul(lane_scales, _splat(builder, x_scale)), flags=["contract"])
                builder.store(builder.fadd(builder.load(accumulator), scaled, flags=["contract"]), accumulator)
                if min_factor is not None:
                    builder.store(builder.fadd(builder.load(min_total), builder.fmul(min_factor, x_sum),
                                               flags=["contract"]), min_total)
    totals = [builder.fsub(_lane_total(builder, builder.load(accumulator)), builder.load(min_total))
              for accumulator, min_total in zip(accumulators, min_totals)]
    return context.make_tuple(builder, signature.return_type, totals)


def _super_block_dot4_intrinsic(block_format, choose_dot_lanes):
    """A K-quant dot4 (as _dot4_intrinsic, plus x_block_sums: float32 [n, k/32], scale * sum of quants)."""
    @intrinsic
    def dot4(typingctx, data, ra, rb, rc, rd, x_quants, x_scales, x_lane_sums, x_block_sums, token, prefetch_bytes):
        if not (isinstance(data, types.Array) and data.ndim == 2):
            return None

        def codegen(context, builder, signature, args):
            return _emit_super_block_dot4(block_format, choose_dot_lanes(context), context, builder, signature, args)

        result_type = types.UniTuple(types.float32, 4)
        return (result_type(data, ra, rb, rc, rd, x_quants, x_scales, x_lane_sums, x_block_sums, token,
                            prefetch_bytes), codegen)

    return dot4


def _vnni_where_available(context):
    return _dot_lanes_vnni if host_has_vnni(context) else _dot_lanes_portable


def _portable(context):
    return _dot_lanes_portable


q8_0_dot4 = _dot4_intrinsic(BLOCK_FORMATS["Q8_0"], _vnni_where_available)
q5_0_dot4 = _dot4_intrinsic(BLOCK_FORMATS["Q5_0"], _vnni_where_available)
q4_0_dot4 = _dot4_intrinsic(BLOCK_FORMATS["Q4_0"], _vnni_where_available)
# the same dots on any CPU (tests compare them with the VNNI ones)
q8_0_dot4_portable = _dot4_intrinsic(BLOCK_FORMATS["Q8_0"], _portable)
q5_0_dot4_portable = _dot4_intrinsic(BLOCK_FORMATS["Q5_0"], _portable)
q4_0_dot4_portable = _dot4_intrinsic(BLOCK_FORMATS["Q4_0"], _portable)
q6_k_dot4 = _super_block_dot4_intrinsic(SUPER_BLOCK_FORMATS["Q6_K"], _vnni_where_available)
q4_k_dot4 = _super_block_dot4_intrinsic(SUPER_BLOCK_FORMATS["Q4_K"], _vnni_where_available)
q6_k_dot4_portable = _super_block_dot4_intrinsic(SUPER_BLOCK_FORMATS["Q6_K"], _portable)
q4_k_dot4_portable = _super_block_dot4_intrinsic(SUPER_BLOCK_FORMATS["Q4_K"], _portable)


@njit(cache=True, inline="always")
def _block_scale(x, t, first):
    """(scale, 1/scale) of x[t, first:first + 32]: max|x| / 127; nan (and 0) when the block holds inf or nan, so
    its dots become nan as float math would."""
    amax = np.float32(0.0)
    total = np.float32(0.0)
    for j in range(BLOCK_VALUES):
        amax = max(amax, abs(x[t, first + j]))
        total += x[t, first + j]
    scale = amax / np.float32(127.0)
    if not np.isfinite(total) or not np.isfinite(amax):
        return np.float32(np.nan), np.float32(0.0)
    return scale, (np.float32(1.0) / scale if scale > 0 else np.float32(0.0))


@njit(cache=True, inline="always")
def _quant(value, inverse):
    return np.int8(np.int32(np.rint(value * inverse)))


@njit(cache=True)
def quantize_activations_into(x, quants, scales, lane_sums, block_sums):
    """x: float32 [n, k] -> quants int8 [n, k] and scales float32 [n, k/32] with x ~= quants * scale (per block of
    32: scale = max|x| / 127, quants rounded to nearest), lane_sums int32 [n, k/4] = sums of 4 quants in a row,
    block_sums float32 [n, k/32] = scale * the sum of the block's quants (for the K-quants' mins)."""
    for t in range(x.shape[0]):
        for block in range(x.shape[1] // BLOCK_VALUES):
            first = block * BLOCK_VALUES
            scale, inverse = _block_scale(x, t, first)
            scales[t, block] = scale
            for j in range(BLOCK_VALUES):
                quants[t, first + j] = _quant(x[t, first + j], inverse)
        for lane in range(x.shape[1] // LANE_VALUES):
            total = np.int32(0)
            for j in range(LANE_VALUES):
                total += np.int32(quants[t, lane * LANE_VALUES + j])
            lane_sums[t, lane] = total
        for block in range(x.shape[1] // BLOCK_VALUES):
            total = np.int32(0)
            for lane in range(block * 8, block * 8 + 8):
                total += lane_sums[t, lane]
            block_sums[t, block] = scales[t, block] * np.float32(total)


@njit(cache=True)
def round_activations(x):
    """x rounded to its 8-bit grid (quants * scale as quantize_activations_into picks them), as float32: a float
    GEMM on it equals the integer dots up to float32 summation order, so a prefill chunk (BLAS on decoded tiles)
    and a decode step (int8 dots) see the same activations."""
    rounded = np.empty_like(x)
    for t in range(x.shape[0]):
        for block in range(x.shape[1] // BLOCK_VALUES):
            first = block * BLOCK_VALUES
            scale, inverse = _block_scale(x, t, first)
            for j in range(BLOCK_VALUES):
                rounded[t, first + j] = np.float32(_quant(x[t, first + j], inverse)) * scale
    return rounded
