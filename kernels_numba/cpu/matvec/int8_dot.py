"""Dot products of quantized rows with 8-bit activations (int8 x int8 sums in integer SIMD), as llama.cpp does.

The float kernels (block_dot.py) turn every weight into float32 before the FMA, so on this CPU they run at
2.5-5 GB/s per core, compute-bound, while a core streams ~12 GB/s. Here the activation vector is quantized once
per call, 32 values to a block with one float scale (like llama.cpp's Q8_0 activations), and each weight block's
integer dot with it is one VNNI `vpdpbusd` (32 byte products summed into 8 int32 lanes), then one float FMA
with the two block scales. numba cannot emit VNNI itself, so the row loop is written as LLVM IR (numba
`intrinsic`); on a CPU without AVX512-VNNI the same IR uses the integer instructions it has (ir/byte_dot.py:
AVX-VNNI on ymm, AVX2's vpmaddubsw, else plain widening multiplies: same integers, same result).

vpdpbusd multiplies unsigned by signed bytes. The weight quants are made unsigned: Q5_0 and Q4_0 store q in
0..31 / 0..15 for the value q - 16 / q - 8 already, Q8_0's signed bytes are flipped to w + 128 (an xor of the sign
bit). The activation quants stay signed, and the lanes start from -zero_point * (the sum of the four activation
quants of each lane, computed once per call: `lane_starts`), so the lane totals are exactly sum(value * x).

Software prefetch ~10 KiB ahead in the row stream doubled the single-core rate (24 -> 14 ms for the 178 MB
Gemma 3 LM head; the hardware prefetcher alone kept too few lines in flight).

Numbers: the result differs from the exact float dot by the activation rounding (each value within half a step
of its block's max/127), the same order as llama.cpp's own logits vs fp32 math.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels_numba.cpu.ir.byte_dot import best_byte_dot, byte_dot
from kernels_numba.cpu.ir.half import bits_to_float32
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.ir.quantize_ir import block_abs_max_bits, quantize_block_into
from kernels_numba.cpu.ir.vector_ir import (broadcast_runs, concat, lane_total, load_half, load_vector, memory_barrier,
                                         prefetch, row_pointer)

BLOCK_VALUES = 32  # activation values per scale (and Q8_0 weight values per block)
LANE_VALUES = 4  # activation quants summed into one int32 lane by vpdpbusd
PREFETCH_BYTES = 10 * 1024  # measured: 2.7 KiB 15.2 ms, 10.6 KiB 14.0 ms, 21 KiB 15.2 ms, 42 KiB 17.6 ms

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F32 = ir.FloatType()
_BYTES16 = ir.VectorType(_I8, 16)
_BYTES32 = ir.VectorType(_I8, 32)
_BYTES64 = ir.VectorType(_I8, 64)
_LANES8 = ir.VectorType(_I32, 8)
_LANES = ir.VectorType(_I32, 16)  # a pair of 32-value blocks: lanes 0-7 the first block, 8-15 the second
_FLOAT_LANES = ir.VectorType(_F32, 16)
PAIR_VALUES = 2 * BLOCK_VALUES  # one 512-bit vpdpbusd: 64 byte products into 16 int32 lanes


def _nibble_pair(builder, blocks, offset):
    """16 bytes of packed nibbles at `offset` in each block (one or two; a missing second block is zero) ->
    <64 x i8>: each block's low nibbles (values 0-15), then its high ones (16-31)."""
    packed = [load_vector(builder, builder.gep(block, [_I64(offset)]), _BYTES16) for block in blocks]
    packed = concat(builder, packed[0], packed[1] if len(packed) == 2 else ir.Constant(_BYTES16, [0] * 16))
    low = builder.and_(packed, ir.Constant(_BYTES32, [0x0F] * 32))
    high = builder.lshr(packed, ir.Constant(_BYTES32, [4] * 32))
    order = [*range(16), *range(32, 48), *range(16, 32), *range(48, 64)]
    return builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(_I32, 64), order))


def _unpack_q8_0(builder, blocks):
    """d f16 | 32 int8: the quants + 128 as unsigned bytes (an xor of the sign bit)."""
    quants = [load_vector(builder, builder.gep(block, [_I64(2)]), _BYTES32) for block in blocks]
    quants = concat(builder, quants[0], quants[1] if len(quants) == 2 else ir.Constant(_BYTES32, [0] * 32))
    return builder.xor(quants, ir.Constant(_BYTES64, [0x80] * 64))


def _unpack_q4_0(builder, blocks):
    """d f16 | 16 bytes of nibbles: quants 0..15 (value q - 8)."""
    return _nibble_pair(builder, blocks, 2)


def _unpack_q4_1(builder, blocks):
    """d f16 | m f16 | 16 bytes of nibbles: quants 0..15 (value d * q + m)."""
    return _nibble_pair(builder, blocks, 4)


def _unpack_q5_0(builder, blocks):
    """d f16 | qh u32 (bit j: the fifth bit of value j) | 16 bytes of nibbles: quants 0..31 (value q - 16)."""
    high_bits = [builder.zext(builder.load(builder.bitcast(builder.gep(block, [_I64(2)]), _I32.as_pointer()),
                                           align=1), _I64) for block in blocks]
    if len(high_bits) == 2:
        high_bits = [builder.or_(high_bits[0], builder.shl(high_bits[1], _I64(32)))]
    fifth_bit = builder.bitcast(high_bits[0], ir.VectorType(ir.IntType(1), 64))
    sixteens = builder.select(fifth_bit, ir.Constant(_BYTES64, [16] * 64), ir.Constant(_BYTES64, [0] * 64))
    return builder.or_(_nibble_pair(builder, blocks, 6), sixteens)


@dataclass(frozen=True)
class WeightPair:
    """Two consecutive runs of 32 weights of one row: 64 unsigned quants and the 16 lanes' weight scales."""
    quants: ir.Value
    lane_scales: ir.Value


@dataclass(frozen=True)
class BlockFormat:
    """A weight type with 32 values per block, one f16 scale first, and values d * (q - zero_point), q unsigned.
    A unit (one step of the row loop) is two blocks, one vpdpbusd."""
    block_bytes: int
    zero_point: int  # subtracted from the unsigned quants: the lanes start from -zero_point * sum(x quants)
    unpack: Callable  # (builder, [1 or 2 block pointers]) -> <64 x i8> unsigned quants in the order of x
    min_offset: int = 0  # Q4_1: where the block's f16 min m lies (value d * q + m); 0: no min

    pairs_per_unit = 1
    # (row, token) accumulators in one loop over the rows: 4 rows x 4 tokens (16 of the 32 vector registers, next
    # to the 4 tokens' x operands) made LLVM spill accumulators; 2 rows a loop, x read twice from L1, is faster
    # (Q5_0 2048x640, 4 tokens: 0.147 -> 0.137 ms)
    accumulators_per_loop = 8
    # the unit's x operands (4 tokens x 1 pair: 12 vectors) are loaded once and shared by the rows
    reloads_x_in_passes = False

    @property
    def unit_bytes(self):
        return 2 * self.block_bytes

    @property
    def has_mins(self):
        return self.min_offset != 0

    def pairs(self, builder, unit):
        """([the unit's WeightPair], the blocks' min factors -m or None)."""
        second = builder.gep(unit, [_I64(self.block_bytes)])
        scales = broadcast_runs(builder, (load_half(builder, unit), load_half(builder, second)), _FLOAT_LANES)
        return [WeightPair(self.unpack(builder, [unit, second]), scales)], self._min_factors(builder, [unit, second])

    def last_single_block(self, builder, block):
        """A row's odd last block as a pair whose second half is zero (quants and scale)."""
        scales = broadcast_runs(builder, (load_half(builder, block), _F32(0.0)), _FLOAT_LANES)
        return [WeightPair(self.unpack(builder, [block]), scales)], self._min_factors(builder, [block])

    def _min_factors(self, builder, blocks):
        """<8 x float> of -m of each block (the dots subtract min factor * x block sum), zero past them."""
        if not self.has_mins:
            return None
        factors = ir.Constant(ir.VectorType(_F32, 8), [0.0] * 8)
        for i, block in enumerate(blocks):
            factors = builder.insert_element(factors, builder.fneg(load_half(builder, block, self.min_offset)),
                                             _I32(i))
        return factors


BLOCK_FORMATS = {"Q8_0": BlockFormat(34, 128, _unpack_q8_0), "Q5_0": BlockFormat(22, 16, _unpack_q5_0),
                 "Q4_0": BlockFormat(18, 8, _unpack_q4_0), "Q4_1": BlockFormat(20, 0, _unpack_q4_1, min_offset=2)}


SUPER_BLOCK_VALUES = 256  # K-quants: eight runs of 32 values share one super-block header


def _q6_k_pairs(builder, block):
    """Q6_K super-block (ql[128] low 4 bits | qh[64] high 2 bits | 16 int8 scales | d f16): value d * sc * (q - 32),
    one scale per 16 values, so the 16 lanes of a pair of runs take 4 scales, 4 lanes each."""
    d = load_half(builder, block, 208)
    scales = builder.sitofp(load_vector(builder, builder.gep(block, [_I64(192)]), _BYTES16), ir.VectorType(_F32, 16))
    scales = builder.fmul(scales, broadcast_runs(builder, (d,), ir.VectorType(_F32, 16)))
    low_mask, two_bits = ir.Constant(_BYTES32, [0x0F] * 32), ir.Constant(_BYTES32, [3] * 32)
    pairs = []
    for half in range(2):
        low_first = load_vector(builder, builder.gep(block, [_I64(64 * half)]), _BYTES32)
        low_second = load_vector(builder, builder.gep(block, [_I64(64 * half + 32)]), _BYTES32)
        high = load_vector(builder, builder.gep(block, [_I64(128 + 32 * half)]), _BYTES32)
        nibbles = (builder.and_(low_first, low_mask), builder.and_(low_second, low_mask),
                   builder.lshr(low_first, ir.Constant(_BYTES32, [4] * 32)),
                   builder.lshr(low_second, ir.Constant(_BYTES32, [4] * 32)))
        runs = []
        for run in range(4):
            high_bits = builder.and_(builder.lshr(high, ir.Constant(_BYTES32, [2 * run] * 32)), two_bits)
            runs.append(builder.or_(nibbles[run], builder.shl(high_bits, ir.Constant(_BYTES32, [4] * 32))))
        for first_run in (0, 2):
            first_scale = 8 * half + 2 * first_run
            lane_scales = builder.shuffle_vector(scales, ir.Constant(ir.VectorType(_F32, 16), ir.Undefined),
                                                 ir.Constant(_LANES, [first_scale + i // 4 for i in range(16)]))
            pairs.append(WeightPair(concat(builder, runs[first_run], runs[first_run + 1]), lane_scales))
    return pairs, None


def _bytes8(builder, vector, offsets):
    return builder.shuffle_vector(vector, vector, ir.Constant(_LANES8, list(offsets)))


def _q4_k_scales_and_mins(builder, block):
    """The 8 runs' 6-bit scales and mins from the 12 packed bytes at offset 4 (ggml's get_scale_min_k4), as
    <8 x float>: runs 0-3 take the low 6 bits of bytes 4-7 (scales) and 8-11 (mins); runs 4-7 take a nibble of
    bytes 12-15 plus the top 2 bits of bytes 4-7 (scales) or 8-11 (mins) as bits 4-5."""
    packed = load_vector(builder, block, _BYTES16)
    bytes8 = ir.VectorType(_I8, 8)
    high_four = [0] * 4 + [0xFF] * 4

    def top_bits(offsets):  # lanes 4-7: (byte >> 6) << 4
        moved = builder.shl(builder.lshr(_bytes8(builder, packed, offsets), ir.Constant(bytes8, [6] * 8)),
                            ir.Constant(bytes8, [4] * 8))
        return builder.and_(moved, ir.Constant(bytes8, high_four))

    scale_bytes = _bytes8(builder, packed, (4, 5, 6, 7, 12, 13, 14, 15))
    scales = builder.or_(builder.and_(scale_bytes, ir.Constant(bytes8, [63] * 4 + [15] * 4)),
                         top_bits((4, 5, 6, 7, 4, 5, 6, 7)))
    min_bytes = builder.lshr(_bytes8(builder, packed, (8, 9, 10, 11, 12, 13, 14, 15)),
                             ir.Constant(bytes8, [0] * 4 + [4] * 4))
    mins = builder.or_(builder.and_(min_bytes, ir.Constant(bytes8, [63] * 4 + [0x0F] * 4)),
                       top_bits((8, 9, 10, 11, 8, 9, 10, 11)))
    to_float = ir.VectorType(_F32, 8)
    return builder.uitofp(scales, to_float), builder.uitofp(mins, to_float)


def _q4_k_pairs(builder, block):
    """Q4_K super-block (d f16 | dmin f16 | 12 bytes of 6-bit scales and mins | 128 bytes of nibbles: runs 2c and
    2c+1 in the low and high nibbles of chunk c, so one chunk is one pair): value d * sc * q - dmin * m.
    Returns (4 WeightPairs, the 8 runs' dmin * m)."""
    d, d_min = load_half(builder, block), load_half(builder, block, 2)
    scales, mins = _q4_k_scales_and_mins(builder, block)
    to_float = ir.VectorType(_F32, 8)
    scales = builder.fmul(scales, broadcast_runs(builder, (d,), to_float))
    pairs = []
    for chunk in range(4):
        packed = load_vector(builder, builder.gep(block, [_I64(16 + 32 * chunk)]), _BYTES32)
        quants = concat(builder, builder.and_(packed, ir.Constant(_BYTES32, [0x0F] * 32)),
                         builder.lshr(packed, ir.Constant(_BYTES32, [4] * 32)))
        lane_scales = builder.shuffle_vector(scales, scales,
                                             ir.Constant(_LANES, [2 * chunk + i // 8 for i in range(16)]))
        pairs.append(WeightPair(quants, lane_scales))
    return pairs, builder.fmul(mins, broadcast_runs(builder, (d_min,), to_float))


@dataclass(frozen=True)
class SuperBlockFormat:
    """A K-quant: 256 values per super-block (one unit of the row loop) in 8 runs of 32, each run with its own
    scale (and min)."""
    block_bytes: int
    zero_point: int
    pairs: Callable  # (builder, super-block pointer) -> (4 WeightPairs, <8 x float> min factors or None)
    has_mins: bool
    # passes of several tokens reload x per (row, pair) behind a memory barrier, as memory operands: 4 tokens x 4
    # pairs of x do not fit in registers next to 16 accumulators (4x4 loop 753 -> 516 instructions, stack traffic
    # 267 -> 36). One token's x (4 pairs, 12 vectors) fits and stays shared by the rows.
    reloads_x_in_passes = True

    pairs_per_unit = SUPER_BLOCK_VALUES // PAIR_VALUES
    accumulators_per_loop = 16

    @property
    def unit_bytes(self):
        return self.block_bytes


SUPER_BLOCK_FORMATS = {"Q6_K": SuperBlockFormat(210, 32, _q6_k_pairs, has_mins=False),
                       "Q4_K": SuperBlockFormat(144, 0, _q4_k_pairs, has_mins=True)}
WEIGHT_FORMATS = {**BLOCK_FORMATS, **SUPER_BLOCK_FORMATS}


def _activation_pointers(context, builder, arg_types, arrays, token):
    """Pointers into token `token`'s rows of the 8-bit activations: (quants i8*, lane scales f32*, lane starts
    i32*, block sums f32*)."""
    quants = row_pointer(context, builder, arg_types[0], arrays[0], token)
    others = [builder.bitcast(row_pointer(context, builder, array_type, array, token), element.as_pointer())
              for array_type, array, element in zip(arg_types[1:], arrays[1:], (_F32, _I32, _F32))]
    return (quants, *others)


@dataclass(frozen=True)
class ActivationPair:
    """Two consecutive 32-value blocks of one token: 64 signed quants, the 16 lanes' starts (-zero_point * lane
    sums) and their x scales."""
    quants: ir.Value
    start: ir.Value
    lane_scales: ir.Value


def _x_pair(builder, x, first_block, has_zero_point, is_single=False):
    """Blocks first_block and first_block + 1 of one token's activations (is_single: only the first, the
    second half zero), as plain loads of lane_operands_into's arrays: nothing is computed per pair. Without a
    zero point (Q4_K) the lanes start from 0, not from a load."""
    quants, lane_scales, lane_starts, _ = x
    values_pointer = builder.gep(quants, [builder.mul(first_block, _I64(BLOCK_VALUES))])
    first_lane = builder.mul(first_block, _I64(BLOCK_VALUES // LANE_VALUES))
    starts_pointer, scales_pointer = builder.gep(lane_starts, [first_lane]), builder.gep(lane_scales, [first_lane])
    float_lanes8 = ir.VectorType(_F32, 8)
    if not is_single:
        values = load_vector(builder, values_pointer, _BYTES64)
        starts = load_vector(builder, starts_pointer, _LANES, align=4) if has_zero_point else None
        scales = load_vector(builder, scales_pointer, _FLOAT_LANES, align=4)
    else:
        values = concat(builder, load_vector(builder, values_pointer, _BYTES32), ir.Constant(_BYTES32, [0] * 32))
        starts = concat(builder, load_vector(builder, starts_pointer, _LANES8, align=4),
                         ir.Constant(_LANES8, [0] * 8)) if has_zero_point else None
        scales = concat(builder, load_vector(builder, scales_pointer, float_lanes8, align=4),
                         ir.Constant(float_lanes8, [0.0] * 8))
    return ActivationPair(values, ir.Constant(_LANES, None) if starts is None else starts, scales)


def _x_block_sums(builder, x, first_block, num_blocks):
    """The block sums (scale * sum of quants) of one token's num_blocks blocks from first_block (a super-block's 8,
    or Q4_1's 1 or 2 zero-padded to 8), for the mins."""
    sums = load_vector(builder, builder.gep(x[3], [first_block]), ir.VectorType(_F32, num_blocks), align=4)
    if num_blocks == 8:
        return sums
    padding = ir.Constant(ir.VectorType(_F32, num_blocks), [0.0] * num_blocks)
    picks = [i if i < num_blocks else num_blocks for i in range(8)]  # index num_blocks: a zero of the padding
    return builder.shuffle_vector(sums, padding, ir.Constant(ir.VectorType(_I32, 8), picks))


def _dot_operands(context, builder, signature, args, num_tokens):
    """(row byte pointers, per-token activation pointers, number of x blocks, prefetch distance) of a dots call."""
    arg_types = signature.args
    data, rows, x_arrays, first_token, prefetch_bytes = args[0], args[1:5], args[5:9], args[9], args[10]
    row_pointers = [row_pointer(context, builder, arg_types[0], data, row) for row in rows]
    xs = [_activation_pointers(context, builder, arg_types[5:9], x_arrays, builder.add(first_token, _I64(t)))
          for t in range(num_tokens)]
    row_length = builder.extract_value(context.make_array(arg_types[5])(context, builder, x_arrays[0]).shape, 1)
    return row_pointers, xs, builder.udiv(row_length, _I64(BLOCK_VALUES)), prefetch_bytes


def _accumulators(builder, num_rows, num_tokens, zero):
    return [[cgutils.alloca_once_value(builder, zero) for _ in range(num_tokens)] for _ in range(num_rows)]


def _accumulate(builder, accumulator, value):
    builder.store(builder.fadd(builder.load(accumulator), value, flags=["contract"]), accumulator)


def _emit_dots(weight_format, num_tokens, lane_dot, context, builder, signature, args):
    """The IR of 4 rows x num_tokens dots: one loop over the row's units; each unit's weights are unpacked once
    and serve every token; each (row, token) has its own 16 float lanes (allocas LLVM keeps in registers) updated
    in the same order whatever num_tokens is, so a token's result does not depend on the tokens it comes with.
    Block formats with an odd number of blocks finish with a half-empty pair; K-quant mins subtract
    min factor * x block sum, 8 lanes per super-block."""
    row_pointers, xs, num_blocks, prefetch_bytes = _dot_operands(context, builder, signature, args, num_tokens)
    accumulators = _accumulators(builder, len(row_pointers), num_tokens, ir.Constant(_FLOAT_LANES, None))
    min_totals = _accumulators(builder, len(row_pointers), num_tokens, ir.Constant(ir.VectorType(_F32, 8), None))
    blocks_per_unit = 2 * weight_format.pairs_per_unit

    def accumulate_unit(rows, first_block, weights_of, is_single=False):
        def x_pair(t, p):
            return _x_pair(builder, xs[t], builder.add(first_block, _I64(2 * p)), lane_dot.uses_starts, is_single)
        reloads_x = weight_format.reloads_x_in_passes and num_tokens > 1
        shared_pairs = (None if reloads_x else
                        [[x_pair(t, p) for p in range(weight_format.pairs_per_unit)] for t in range(num_tokens)])
        blocks_in_unit = 1 if is_single else 2 * weight_format.pairs_per_unit
        x_sums = ([_x_block_sums(builder, x, first_block, blocks_in_unit) for x in xs] if weight_format.has_mins
                  else None)
        for r in rows:
            weight_pairs, min_factors = weights_of(row_pointers[r])
            for p, w in enumerate(weight_pairs):
                if reloads_x:
                    memory_barrier(builder)
                for t in range(num_tokens):
                    x = x_pair(t, p) if reloads_x else shared_pairs[t][p]
                    lanes = builder.sitofp(lane_dot.add(builder, x.start, w.quants, x.quants), _FLOAT_LANES)
                    scales = builder.fmul(w.lane_scales, x.lane_scales)
                    _accumulate(builder, accumulators[r][t], builder.fmul(lanes, scales, flags=["contract"]))
            for t in range(num_tokens if min_factors is not None else 0):
                _accumulate(builder, min_totals[r][t], builder.fmul(min_factors, x_sums[t], flags=["contract"]))

    def accumulate_rows(rows):
        with cgutils.for_range(builder, builder.udiv(num_blocks, _I64(blocks_per_unit))) as loop:
            def unit_weights(row_pointer):
                unit = builder.gep(row_pointer, [builder.mul(loop.index, _I64(weight_format.unit_bytes))])
                prefetch(builder, builder.gep(unit, [prefetch_bytes]))
                return weight_format.pairs(builder, unit)
            accumulate_unit(rows, builder.mul(loop.index, _I64(blocks_per_unit)), unit_weights)
        if isinstance(weight_format, BlockFormat):
            last_block = builder.sub(num_blocks, _I64(1))
            with builder.if_then(builder.trunc(num_blocks, ir.IntType(1))):
                def last_weights(row_pointer):
                    block = builder.gep(row_pointer, [builder.mul(last_block, _I64(weight_format.block_bytes))])
                    return weight_format.last_single_block(builder, block)
                accumulate_unit(rows, last_block, last_weights, is_single=True)

    rows_per_loop = max(1, min(len(row_pointers), weight_format.accumulators_per_loop // num_tokens))
    for first_row in range(0, len(row_pointers), rows_per_loop):
        accumulate_rows(range(first_row, min(len(row_pointers), first_row + rows_per_loop)))
    totals = [builder.fsub(lane_total(builder, builder.load(accumulators[r][t])),
                           lane_total(builder, builder.load(min_totals[r][t])))
              for t in range(num_tokens) for r in range(len(row_pointers))]
    return context.make_tuple(builder, signature.return_type, totals)


def _dots_intrinsic(weight_format, num_tokens, choose_lane_dot):
    """Dots of 4 rows with num_tokens tokens, in `weight_format`, with the lane dot (ir/byte_dot.py)
    choose_lane_dot(context, zero point) picks at compile time."""
    @intrinsic
    def dots(typingctx, data, ra, rb, rc, rd, x_quants, x_lane_scales, x_lane_starts, x_block_sums, first_token,
             prefetch_bytes):
        """(dot(row ra, x[first_token]), ..., dot(row rd, x[first_token]), dot(row ra, x[first_token + 1]), ...):
        rows of data (uint8 [rows, bytes], rows may repeat) with num_tokens tokens of the 8-bit activations
        (quantize_activations_into, then lane_operands_into for this weight type's zero point). prefetch_bytes:
        how far ahead in each row's stream to prefetch (0: nothing new, e.g. later tokens over the same rows)."""
        if not (isinstance(data, types.Array) and data.ndim == 2):
            return None

        def codegen(context, builder, signature, args):
            lane_dot = choose_lane_dot(context, weight_format.zero_point)
            return _emit_dots(weight_format, num_tokens, lane_dot, context, builder, signature, args)

        result_type = types.UniTuple(types.float32, 4 * num_tokens)
        return (result_type(data, ra, rb, rc, rd, x_quants, x_lane_scales, x_lane_starts, x_block_sums,
                            first_token, prefetch_bytes), codegen)

    return dots


_FORMAT_OF_CODE = {qt.Q8_0: "Q8_0", qt.Q5_0: "Q5_0", qt.Q4_0: "Q4_0", qt.Q4_1: "Q4_1", qt.Q6_K: "Q6_K",
                   qt.Q4_K: "Q4_K"}


@intrinsic
def int8_dots(typingctx, code, num_tokens, data, ra, rb, rc, rd, x_quants, x_lane_scales, x_lane_starts,
              x_block_sums, first_token, prefetch_bytes):
    """The dots of _dots_intrinsic for a literal weight type code and token count (int8_matvec's leaf is compiled
    per code), so a kernel branching on its code emits only its own type's IR."""
    if not (isinstance(code, types.IntegerLiteral) and code.literal_value in _FORMAT_OF_CODE
            and isinstance(num_tokens, types.IntegerLiteral) and isinstance(data, types.Array) and data.ndim == 2):
        return None
    weight_format, count = WEIGHT_FORMATS[_FORMAT_OF_CODE[code.literal_value]], num_tokens.literal_value

    def codegen(context, builder, signature, args):
        inner = types.UniTuple(types.float32, 4 * count)(*signature.args[2:])
        lane_dot = best_byte_dot(context, weight_format.zero_point)
        return _emit_dots(weight_format, count, lane_dot, context, builder, inner, args[2:])

    return (types.UniTuple(types.float32, 4 * count)(code, num_tokens, data, ra, rb, rc, rd, x_quants,
                                                      x_lane_scales, x_lane_starts, x_block_sums, first_token,
                                                      prefetch_bytes), codegen)


TOKENS_PER_PASS = 4  # tokens of a dot4x4: 4 rows x 4 tokens of float lanes fill 16 of the 32 vector registers


def _lane_dot_chooser(kind):
    if kind is None:
        return best_byte_dot
    return lambda context, zero_point: byte_dot(kind, zero_point)


@functools.lru_cache(maxsize=None)
def dots_of_kind(format_name: str, kind: str | None = None):
    """(dot4: 4 rows x 1 token, dot4x4: 4 rows x TOKENS_PER_PASS tokens) of one weight type, with the lane dot of
    `kind` (ir/byte_dot.py; None: the best the target compiles for). Tests compare the kinds' results."""
    weight_format = WEIGHT_FORMATS[format_name]
    return (_dots_intrinsic(weight_format, 1, _lane_dot_chooser(kind)),
            _dots_intrinsic(weight_format, TOKENS_PER_PASS, _lane_dot_chooser(kind)))


INF_BITS = 0x7F800000  # |x| bits at or above: inf or nan


@njit(cache=True, inline="always")
def scale_of_abs_max_bits(amax_bits):
    """A block's (scale, 1/scale) from its max |x| bits (quantize_ir.block_abs_max_bits): max|x| / 127; nan (and
    0) when the block holds inf or nan, so its dots become nan as float math would."""
    if amax_bits >= INF_BITS:
        return np.float32(np.nan), np.float32(0.0)
    scale = bits_to_float32(amax_bits) / np.float32(127.0)
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
        quantize_row_into(x, quants, scales, lane_sums, block_sums, t)


@njit(cache=True, inline="always")
def quantize_row_into(x, quants, scales, lane_sums, block_sums, t):
    """Row t of quantize_activations_into (rows are independent: threads may take different rows)."""
    # contiguous rows for the block IR (a no-op for C arrays, a copy of a strided row)
    row, row_quants, row_lane_sums = (np.ascontiguousarray(x[t]), np.ascontiguousarray(quants[t]),
                                      np.ascontiguousarray(lane_sums[t]))
    for block in range(x.shape[1] // BLOCK_VALUES):
        first = block * BLOCK_VALUES
        scale, inverse = scale_of_abs_max_bits(block_abs_max_bits(row, first))
        scales[t, block] = scale
        total = quantize_block_into(row, first, inverse, row_quants, row_lane_sums)
        block_sums[t, block] = scale * np.float32(total)
    if row_quants.ctypes.data != quants[t].ctypes.data:  # a copy of a strided row: write it back
        for j in range(row_quants.size):  # (element loops: see kv_store.store_kv_into)
            quants[t, j] = row_quants[j]
        for j in range(row_lane_sums.size):
            lane_sums[t, j] = row_lane_sums[j]


@njit(cache=True)
def quantize_activations(x):
    """quantize_activations_into on new arrays: (quants int8 [n, k], scales float32 [n, k/32], lane_sums int32
    [n, k/4], block_sums float32 [n, k/32])."""
    n, k = x.shape
    quants = np.empty((n, k), dtype=np.int8)
    scales = np.empty((n, k // BLOCK_VALUES), dtype=np.float32)
    lane_sums = np.empty((n, k // LANE_VALUES), dtype=np.int32)
    block_sums = np.empty((n, k // BLOCK_VALUES), dtype=np.float32)
    quantize_activations_into(x, quants, scales, lane_sums, block_sums)
    return quants, scales, lane_sums, block_sums


ZERO_POINTS = {name: weight_format.zero_point for name, weight_format in WEIGHT_FORMATS.items()}


@njit(cache=True)
def lane_operands_into(scales, lane_sums, zero_point, lane_scales, lane_starts):
    """The dots' per-lane activation operands, from quantize_activations_into's scales and lane sums: lane_scales
    float32 [n, k/4] (each block's scale on its 8 lanes) and lane_starts int32 [n, k/4] = -zero_point * lane sums
    (where each lane's integer dot starts, which subtracts the weights' zero point: ZERO_POINTS)."""
    lanes_per_block = BLOCK_VALUES // LANE_VALUES
    for t in range(lane_sums.shape[0]):
        for lane in range(lane_sums.shape[1]):
            lane_scales[t, lane] = scales[t, lane // lanes_per_block]
            lane_starts[t, lane] = -zero_point * lane_sums[t, lane]


@njit(cache=True)
def round_activations(x):
    """x rounded to its 8-bit grid (quants * scale as quantize_activations_into picks them), as float32: a float
    GEMM on it equals the integer dots up to float32 summation order, so a prefill chunk (BLAS on decoded tiles)
    and a decode step (int8 dots) see the same activations."""
    rounded = np.empty_like(x)
    for t in range(x.shape[0]):
        row = np.ascontiguousarray(x[t])  # for the block IR: a no-op for C arrays
        for block in range(x.shape[1] // BLOCK_VALUES):
            first = block * BLOCK_VALUES
            scale, inverse = scale_of_abs_max_bits(block_abs_max_bits(row, first))
            for j in range(BLOCK_VALUES):
                rounded[t, first + j] = np.float32(_quant(x[t, first + j], inverse)) * scale
    return rounded
