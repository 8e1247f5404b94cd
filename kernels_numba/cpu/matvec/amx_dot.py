"""Dots of 16 Q8_0 weight rows with up to 16 tokens of 8-bit activations on AMX tiles (amx_tiles.py), as IR.

Per 32-value block: the weight tile (16 rows x the block's 32 int8 quants, read in place from the GGUF bytes with
the row length as stride) times the block's activation tile is one TDPBSSD into 16 x tokens int32 sums, stored
contiguously as [row, token]. The float epilogue reads those sums as 16-lane vectors, lane i of vector j being
(row, token) = divmod(16 j + i, tokens), and adds sums * (weight scale * activation scale) into float lanes held
in registers: one vector a block for one token, sixteen for sixteen, so a lone decode token pays for one. Each
(row, token) gets the same operations in the same order whatever the number of tokens (lanes are independent,
no FMA contraction), so a token's result is bit-identical alone or in a batch. Two tile sets keep two blocks in
flight.

Other block types would need their quants unpacked to a scratch tile first; measured for Q5_0 (4096 x 640, one
thread) that loses to the VNNI dots at one token (0.39 vs 0.19 ms, 8 tokens: 0.38 vs 0.68), and a type must
take one path at every batch size, so only Q8_0 (the big LM heads) runs here.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels_numba.cpu.ir.amx_tiles import TILE_SETS, amx_call
from kernels_numba.cpu.ir.vector_ir import load_half, load_vector, prefetch

TILE_ROWS = 16
TILE_TOKENS = (1, 2, 4, 8, 16)  # token counts of a pass (padded up): 16 lanes hold whole rows of sums
Q8_0_BLOCK_BYTES = 34  # f16 scale | 32 int8 quants
_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_F32 = ir.FloatType()
_BYTE_POINTER = _I8.as_pointer()
_LANES = ir.VectorType(_I32, 16)
_FLOAT_LANES = ir.VectorType(_F32, 16)
_VECTOR_BYTES = 64
_SCALE_ROW_BYTES = 64  # x_block_scales: 16 floats a block


def _array_pointer(context, builder, array_type, array):
    ary = context.make_array(array_type)(context, builder, array)
    return builder.bitcast(ary.data, _BYTE_POINTER), ary


def _pick(builder, vector, lanes):
    return builder.shuffle_vector(vector, vector, ir.Constant(_LANES, list(lanes)))


def _weight_scales(builder, blocks):
    """The 16 rows' f16 block scales as <16 x float>."""
    scales = ir.Constant(_FLOAT_LANES, ir.Undefined)
    for r, block in enumerate(blocks):
        scales = builder.insert_element(scales, load_half(builder, block), _I32(r))
    return scales


def _emit_group_dots(num_tokens, context, builder, signature, args):
    data_type, _, _, tiles_type, scales_type, totals_type, sums_type, _ = signature.args
    data, first_row, num_rows, x_tiles, x_block_scales, totals, sums, prefetch_bytes = args
    data_pointer, data_struct = _array_pointer(context, builder, data_type, data)
    row_bytes = builder.extract_value(data_struct.strides, 0)
    tiles_pointer, tiles_struct = _array_pointer(context, builder, tiles_type, x_tiles)
    tile_block_bytes = builder.extract_value(tiles_struct.strides, 0)
    num_blocks = builder.extract_value(tiles_struct.shape, 0)
    scales_pointer, _ = _array_pointer(context, builder, scales_type, x_block_scales)
    totals_pointer, _ = _array_pointer(context, builder, totals_type, totals)
    sums_pointer, _ = _array_pointer(context, builder, sums_type, sums)
    group = builder.gep(data_pointer, [builder.mul(first_row, row_bytes)])
    last_row = builder.sub(num_rows, _I64(1))
    row_offsets = [builder.mul(builder.select(builder.icmp_signed("<", _I64(r), num_rows), _I64(r), last_row),
                               row_bytes) for r in range(TILE_ROWS)]  # rows past the end repeat the last one
    num_vectors = num_tokens  # TILE_ROWS * num_tokens sums, 16 a vector
    accumulators = [cgutils.alloca_once_value(builder, ir.Constant(_FLOAT_LANES, None)) for _ in range(num_vectors)]
    token_bytes = _I64(4 * num_tokens)
    load_types = [_I8, _BYTE_POINTER, _I64]

    def row_blocks(block_index):
        block_start = builder.gep(group, [builder.mul(block_index, _I64(Q8_0_BLOCK_BYTES))])
        return block_start, [builder.gep(block_start, [offset]) for offset in row_offsets]

    def issue_tiles(block_index, tile_set):
        """C = the block's weight tile . its activation tile (runs while the other set's epilogue does)."""
        c_tile, a_tile, b_tile = tile_set
        block_start, blocks = row_blocks(block_index)
        for block in blocks:
            prefetch(builder, builder.gep(block, [prefetch_bytes]))
        amx_call(builder, "llvm.x86.tilezero", [_I8], [_I8(c_tile)])
        amx_call(builder, "llvm.x86.tileloadd64", load_types, [_I8(a_tile), builder.gep(block_start, [_I64(2)]),
                                                               row_bytes])
        amx_call(builder, "llvm.x86.tileloadd64", load_types,
                 [_I8(b_tile), builder.gep(tiles_pointer, [builder.mul(block_index, tile_block_bytes)]), token_bytes])
        amx_call(builder, "llvm.x86.tdpbssd", [_I8, _I8, _I8], [_I8(c_tile), _I8(a_tile), _I8(b_tile)])

    def add_block(block_index, tile_set):
        """The block's int32 sums * weight scale * activation scale into the float lanes."""
        c_tile = tile_set[0]
        block_sums = builder.gep(sums_pointer, [_I64(_VECTOR_BYTES * num_vectors * (c_tile // 3))])
        amx_call(builder, "llvm.x86.tilestored64", [_I8, _BYTE_POINTER, _I64], [_I8(c_tile), block_sums, token_bytes])
        x_scales = load_vector(builder, builder.gep(scales_pointer, [builder.mul(block_index, _I64(_SCALE_ROW_BYTES))]),
                         _FLOAT_LANES, align=4)
        token_scales = _pick(builder, x_scales, [i % num_tokens for i in range(16)])
        w_scales = _weight_scales(builder, row_blocks(block_index)[1])
        for j, accumulator in enumerate(accumulators):
            row_scales = _pick(builder, w_scales, [(16 * j + i) // num_tokens for i in range(16)])
            lane_sums = load_vector(builder, builder.gep(block_sums, [_I64(_VECTOR_BYTES * j)]), _LANES, align=4)
            product = builder.fmul(builder.sitofp(lane_sums, _FLOAT_LANES), builder.fmul(row_scales, token_scales))
            builder.store(builder.fadd(builder.load(accumulator), product), accumulator)

    with cgutils.for_range(builder, builder.udiv(num_blocks, _I64(2))) as loop:
        pair = [builder.mul(loop.index, _I64(2)), builder.add(builder.mul(loop.index, _I64(2)), _I64(1))]
        for block_index, tile_set in zip(pair, TILE_SETS):
            issue_tiles(block_index, tile_set)
        for block_index, tile_set in zip(pair, TILE_SETS):
            add_block(block_index, tile_set)
    with builder.if_then(builder.trunc(num_blocks, ir.IntType(1))):
        last_block = builder.sub(num_blocks, _I64(1))
        issue_tiles(last_block, TILE_SETS[0])
        add_block(last_block, TILE_SETS[0])
    for j, accumulator in enumerate(accumulators):
        destination = builder.bitcast(builder.gep(totals_pointer, [_I64(_VECTOR_BYTES * j)]),
                                      _FLOAT_LANES.as_pointer())
        builder.store(builder.load(accumulator), destination, align=4)
    return context.get_dummy_value()


def _group_dots_intrinsic(num_tokens):
    @intrinsic
    def group_dots(typingctx, data, first_row, num_rows, x_tiles, x_block_scales, totals, sums, prefetch_bytes):
        """totals (float32, 16 * num_tokens values, [row, token] order) = dots of rows first_row.. (num_rows of
        them, at most 16) of Q8_0 data with num_tokens tokens given as B tiles (x_tiles int8 [blocks, 8,
        4 * num_tokens], amx_matvec.vnni_activations) and scales (x_block_scales float32 [blocks, 16], zero past
        the real tokens); sums: int32 work space of 2 * 16 * num_tokens values; the tiles configured for
        num_rows x 32 . 8 x 4 * num_tokens."""
        def codegen(context, builder, signature, args):
            return _emit_group_dots(num_tokens, context, builder, signature, args)

        return types.void(data, first_row, num_rows, x_tiles, x_block_scales, totals, sums, prefetch_bytes), codegen

    return group_dots


group_dots_1, group_dots_2, group_dots_4, group_dots_8, group_dots_16 = (_group_dots_intrinsic(n) for n in TILE_TOKENS)
