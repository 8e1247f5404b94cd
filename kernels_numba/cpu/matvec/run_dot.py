"""Dots of weight rows in the run layout (run_layout.py) with 8-bit activations, one SIMD lane per run, as IR.

For each group of G runs of a row (16; a row's tail 8, then 4, then 2) and each token: the lanes start from
-zero_point * the run's sum of x quants, R/4 vpdpbusd (weights unsigned, x signed) add the run's integer dot into
its lane, then one convert and one FMA with (weight run scale * x run scale) add the group into the (row, token)'s
16 float lanes (a narrower group's product is added to the low lanes). A tail of 4 runs of Q5_0, Q4_0, Q4_1 or
Q8_0, as rows of 640 values end in, is folded: its 8 slices of weights and of x (run_activations lays x's tail out
the same way) fill 2 full vectors, so 2 vpdpbusd leave partial run dots in 16 lanes, and one convert and one FMA
with the lanes' scales add them in unreduced: ~8 operations a token instead of ~17 (a tail of 2 runs, as rows of
576 end in: one vector). With 256-bit registers (avx2, avxvnni, and the portable IR) the folded dots end in 8
lanes instead (_folded_run_ints): every 32-byte piece holds the same runs at the same lanes, so on AVX2 the
pieces' vpmaddubsw words add up before one vpmaddwd, then one convert and one FMA a token (AMD EPYC Zen 4 at the
AVX2 tier, 1 thread, 8 tokens, in-process A/B: SmolLM2 Q4_1 1536x576 / 576x576 / 192x576 0.94x the time, Gemma
3 270M Q5_0 2048x640 / 1024x640 / 256x640 0.89-0.95x, the Q8_0 heads 0.95x / 0.99x; 1 token and vnni512 the
same). Q4_K's mins subtract dmin * m * (x scale * x run sum), Q4_1's add m * (x scale * x run sum), also one FMA
per group, into the dots' lanes (on 256-bit registers a full group's in a sweep after the row's dots). The lanes
are summed at the end, always as the same tree (vector_ir.lane_totals: the tokens' trees packed side by side).
Integer sums are exact, so the two
dependency chains the slices are split into (for latency) change nothing, and the float operations of a
(row, token) are the same whatever tokens share the call: one token gets the same bits alone, in a serve batch
or in a speculative verify pass.

On 256-bit registers (the avx2 and avxvnni kinds) a pass of 2 to 8 tokens sweeps a row's full groups half group by
half group (8 runs: one ymm of lanes), then the mins: a half group's 8 unpacked weight vectors stay in registers
across the tokens instead of spilling with 16 of them beside 8 tokens' accumulators (avx2: the mins in a sweep
of their own after the dots, avxvnni: each half group's right after its dots). Each lane gets the same float
operations in the same order, so the same bits. SmolLM2 Q4_1 at 8 tokens, 1 thread, AMD EPYC Zen 4 at the AVX2 tier
(i25-serve8): 576x1536 403 -> 338 cycles a row, 1536x576 206 -> 180, 576x576 239-314 -> 175-186; the Q8_0 head
49152x576 ~5-10% (its signed weights take 16 ymm a half group: vpsignb needs them and their magnitudes). Q6_K (4
slices a run, 8 ymm a group) keeps the plain loop.

Against int8_dot's GGUF-order dots this does one float epilogue per run instead of one per 4 values (8x fewer float
ops) and unpacks 64 weights with 2-3 vector ops instead of ~5.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.ir.byte_dot import AVX2, AVXVNNI, VNNI512, best_byte_dot, byte_dot
from kernels_numba.cpu.matvec.int8_dot import _q4_k_scales_and_mins
from kernels_numba.cpu.matvec.run_layout import FOLDED_MAX_RUNS, FOLDED_SLICES, GROUP_RUNS, ZERO_POINTS
from kernels_numba.cpu.ir.vector_ir import concat, fma, lane_totals, load_half, load_vector, prefetch, row_pointer

_I1, _I8, _I32, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
_F32, _F16 = ir.FloatType(), ir.HalfType()
_CACHE_LINE = 64


def _bytes(width):
    return ir.VectorType(_I8, 4 * width)


def _ints(width):
    return ir.VectorType(_I32, width)


def _floats(width):
    return ir.VectorType(_F32, width)


def _splat(vector_type, value):
    return ir.Constant(vector_type, [value] * vector_type.count)


def _nibble_slices(builder, pairs_pointer, num_pairs, width):
    """num_pairs slice pairs (4 * width bytes each) -> 2 * num_pairs slices of 4-bit values."""
    slices = []
    for m in range(num_pairs):
        packed = load_vector(builder, builder.gep(pairs_pointer, [_I64(4 * width * m)]), _bytes(width))
        slices += [builder.and_(packed, _splat(_bytes(width), 0x0F)), builder.lshr(packed, _splat(_bytes(width), 4))]
    return slices


def _half_scales(builder, pointer, width):
    halves = builder.load(builder.bitcast(pointer, ir.VectorType(_F16, width).as_pointer()), align=1)
    return builder.fpext(halves, _floats(width))


@dataclass(frozen=True)
class GroupWeights:
    """A row's group unpacked: R/4 slices of unsigned quants, the runs' scales and (Q4_K) min factors. A folded
    group (FOLDED_WIDTH runs) holds its 8 slices in two 512-bit vectors instead: 128-bit lane m of the first is
    slice 2m, of the second slice 2m + 1 (as the nibble pairs lie in memory); a folded group of 2 runs in one,
    its 64-bit lanes slices 0, 2, 4, 6, 1, 3, 5, 7."""
    slices: list
    scales: ir.Value
    min_factors: ir.Value | None
    is_folded: bool = False


FOLDED_WIDTH = FOLDED_MAX_RUNS  # groups this narrow (a row's tail) fold their 8 slices into full vectors
HALF_RUNS = GROUP_RUNS // 2  # the runs of a half group: one ymm register of int32 lanes


def _folded_nibbles(builder, group, width, header_bytes=None):
    """The 4 slice pairs of a folded group of `width` runs (after its header, 2 * width bytes unless given) as its
    vectors: (even slices, odd slices) for 4 runs, (even slices | odd slices) for 2."""
    at = 2 * width if header_bytes is None else header_bytes
    packed = load_vector(builder, builder.gep(group, [_I64(at)]), _bytes(4 * width))
    vector_type = _bytes(4 * width)
    low, high = builder.and_(packed, _splat(vector_type, 0x0F)), builder.lshr(packed, _splat(vector_type, 4))
    return [low, high] if width == FOLDED_WIDTH else [concat(builder, low, high)]


def _q5_0_folded(builder, group, width):
    """_q5_0_group of a folded group. 4 runs: the fifth bits of slices 2m (2m + 1) are 16-bit words 2m (2m + 1) of
    the 8 x 2 bytes, word m of the even (odd) mask. 2 runs: byte j holds slice j's, taken in FOLDED_SLICES order."""
    slices = _folded_nibbles(builder, group, width)
    sixteens, zeros = _splat(_bytes(16), 16), _splat(_bytes(16), 0)
    bits_at = builder.gep(group, [_I64(18 * width)])
    masks = _word_parities(builder, bits_at) if width == FOLDED_WIDTH else [_folded_bytes(builder, bits_at)]
    for m, bits in enumerate(masks):
        slices[m] = builder.or_(slices[m], builder.select(builder.bitcast(bits, ir.VectorType(_I1, 64)),
                                                          sixteens, zeros))
    return GroupWeights(slices, _half_scales(builder, group, width), None, True)


def _folded_bytes(builder, pointer):
    """The 8 bytes at pointer as an i64 with its bytes in FOLDED_SLICES order (bytes 0, 2, 4, 6, 1, 3, 5, 7)."""
    eight = ir.VectorType(_I8, 8)
    loaded = builder.load(builder.bitcast(pointer, eight.as_pointer()), align=1)
    picked = builder.shuffle_vector(loaded, loaded, ir.Constant(ir.VectorType(_I32, 8), list(FOLDED_SLICES)))
    return builder.bitcast(picked, _I64)


def _word_parities(builder, pointer):
    """8 16-bit words at pointer -> (i64 of the even words 0, 2, 4, 6; i64 of the odd ones), in scalar shifts and
    masks: a shuffle of <8 x i16> bitcast to <64 x i1> costs ~2x the whole folded group on AVX2 (no mask
    registers)."""
    halves = [builder.load(builder.bitcast(builder.gep(pointer, [_I64(8 * h)]), _I64.as_pointer()), align=1)
              for h in range(2)]
    low_word, second_word = _I64(0xFFFF), _I64(0xFFFF0000)

    def pick(half, shift):  # words (shift/16) and (shift/16 + 2) of a half, as the low 32 bits
        first = builder.and_(builder.lshr(half, _I64(shift)), low_word)
        return builder.or_(first, builder.and_(builder.lshr(half, _I64(shift + 16)), second_word))

    return [builder.or_(pick(halves[0], 16 * parity), builder.shl(pick(halves[1], 16 * parity), _I64(32)))
            for parity in range(2)]


def _q4_0_folded(builder, group, width):
    return GroupWeights(_folded_nibbles(builder, group, width), _half_scales(builder, group, width), None, True)


def _q4_1_mins(builder, group, width):
    """The min factors -m of a Q4_1 group (the dots subtract min factor * x run sum)."""
    return builder.fneg(_half_scales(builder, builder.gep(group, [_I64(2 * width)]), width))


def _q4_1_group(builder, group, width):
    """G f16 scales | G f16 mins | 4 slice pairs."""
    slices = _nibble_slices(builder, builder.gep(group, [_I64(4 * width)]), 4, width)
    return GroupWeights(slices, _half_scales(builder, group, width), _q4_1_mins(builder, group, width))


def _q4_1_folded(builder, group, width):
    return GroupWeights(_folded_nibbles(builder, group, width, 4 * width), _half_scales(builder, group, width),
                        _q4_1_mins(builder, group, width), True)


def folded_lanes(kind):
    """The lanes a folded group's dots end in with the lane dot of `kind`, one register's worth: 16 with 512-bit
    registers (vnni512: a vpdpbusd a vector, as many lanes as the accumulators), else 8 (one ymm; on AVX2 the
    pieces' vpmaddubsw words then add up before one vpmaddwd). Kinds with the same count give the same bits."""
    return GROUP_RUNS if kind == VNNI512 else HALF_RUNS


def _byte_halves(builder, vector):
    """A byte vector's two halves (a 64-byte vector's 32-byte pieces: one ymm register each)."""
    count = vector.type.count // 2
    return [builder.shuffle_vector(vector, vector, ir.Constant(_ints(count), list(range(h * count, (h + 1) * count))))
            for h in range(2)]


def _folded_run_ints(builder, lane_dot, weights, x_values, starts, max_weight):
    """The integer dots of a folded group with one token, left in folded_lanes(kind) lanes: lane j holds a part of
    run j % G's dot, the run starts (G lanes) seeding lanes 0..G-1. x's tail lies folded like the weights
    (run_matvec.run_activations: the even slices, then the odd ones), so their 64-byte vectors line up lane for
    lane (lane G*m + r of a vector is run r). 16 lanes: a lane dot a vector pair. 8 lanes: every 32-byte piece
    holds run j % G at int32 lane j, so the lane dots of all the pieces add into one 8-lane vector, on AVX2 as
    the words of one vpmaddubsw chain (4-bit and 5-bit weights: ByteDot.sum_slices). Integer sums, exact."""
    x_vectors = [load_vector(builder, builder.gep(x_values, [_I64(64 * h)]), _bytes(16))
                 for h in range(len(weights.slices))]
    num_lanes = folded_lanes(lane_dot.kind)
    if num_lanes == GROUP_RUNS:
        lanes = _padded(builder, starts, GROUP_RUNS)
        for w_vector, x_vector in zip(weights.slices, x_vectors):
            lanes = lane_dot.add(builder, lanes, w_vector, x_vector)
        return lanes
    pairs = []
    for w_vector, x_vector in zip(weights.slices, x_vectors):
        pairs += zip(_byte_halves(builder, w_vector), _byte_halves(builder, x_vector))
    return lane_dot.sum_slices(builder, _padded(builder, starts, num_lanes), pairs, max_weight)


def _repeated(builder, vector, count):
    """A G-lane vector repeated into `count` lanes (lane j = lane j % G), as a folded group's dots' lanes are."""
    width = vector.type.count
    return builder.shuffle_vector(vector, vector, ir.Constant(_ints(count), [i % width for i in range(count)]))


def _q5_0_group(builder, group, width):
    """G f16 | 4 slice pairs | 8 x G/2 bytes of fifth bits."""
    slices = _nibble_slices(builder, builder.gep(group, [_I64(2 * width)]), 4, width)
    bits_type = ir.IntType(4 * width)
    sixteens, zeros = _splat(_bytes(width), 16), _splat(_bytes(width), 0)
    for j in range(8):
        pointer = builder.gep(group, [_I64(18 * width + j * width // 2)])
        bits = builder.bitcast(builder.load(builder.bitcast(pointer, bits_type.as_pointer()), align=1),
                               ir.VectorType(_I1, 4 * width))
        slices[j] = builder.or_(slices[j], builder.select(bits, sixteens, zeros))
    return GroupWeights(slices, _half_scales(builder, group, width), None)


def _q4_0_group(builder, group, width):
    """G f16 | 4 slice pairs."""
    return GroupWeights(_nibble_slices(builder, builder.gep(group, [_I64(2 * width)]), 4, width),
                        _half_scales(builder, group, width), None)


def _q8_0_group(builder, group, width):
    """G f16 | 8 slices of quant + 128."""
    slices = [load_vector(builder, builder.gep(group, [_I64(2 * width + 4 * width * j)]), _bytes(width))
              for j in range(8)]
    return GroupWeights(slices, _half_scales(builder, group, width), None)


def _q8_0_folded(builder, group, width):
    """_q8_0_group of a folded group: its slices lie as the even ones, then the odd ones (64 bytes a vector)."""
    vectors = [load_vector(builder, builder.gep(group, [_I64(2 * width + 64 * h)]), _bytes(16))
               for h in range(width // 2)]
    return GroupWeights(vectors, _half_scales(builder, group, width), None, True)


def _q4_k_group(builder, group, width):
    """G/8 GGUF super-block headers (d, dmin, 12 bytes of 6-bit scales and mins) | 4 slice pairs."""
    scales, min_factors = [], []
    for h in range(width // 8):
        header = builder.gep(group, [_I64(16 * h)])
        run_scales, run_mins = _q4_k_scales_and_mins(builder, header)
        d, d_min = (builder.insert_element(ir.Constant(_floats(8), ir.Undefined), load_half(builder, header, o),
                                           _I32(0)) for o in (0, 2))
        splat = ir.Constant(_ints(8), [0] * 8)
        scales.append(builder.fmul(run_scales, builder.shuffle_vector(d, d, splat)))
        min_factors.append(builder.fmul(run_mins, builder.shuffle_vector(d_min, d_min, splat)))
    if width == 16:
        scales, min_factors = [concat(builder, *scales)], [concat(builder, *min_factors)]
    slices = _nibble_slices(builder, builder.gep(group, [_I64(2 * width)]), 4, width)
    return GroupWeights(slices, scales[0], min_factors[0])


def _q6_k_group(builder, group, width):
    """16 int8 scales | d f16 | 2 slice pairs of 64 bytes | 64 bytes of high bit pairs (width is 16)."""
    d = builder.insert_element(ir.Constant(_floats(16), ir.Undefined), load_half(builder, group, 16), _I32(0))
    scales = builder.sitofp(load_vector(builder, group, _bytes(4)), _floats(16))
    scales = builder.fmul(scales, builder.shuffle_vector(d, d, ir.Constant(_ints(16), [0] * 16)))
    slices = _nibble_slices(builder, builder.gep(group, [_I64(18)]), 2, 16)
    high = load_vector(builder, builder.gep(group, [_I64(146)]), _bytes(16))
    for j in range(4):
        pair = builder.and_(builder.lshr(high, _splat(_bytes(16), 2 * j)), _splat(_bytes(16), 3))
        slices[j] = builder.or_(slices[j], builder.shl(pair, _splat(_bytes(16), 4)))
    return GroupWeights(slices, scales, None)


@dataclass(frozen=True)
class RunFormat:
    run_values: int  # values per run (per lane)
    zero_point: int
    group_bytes: Callable  # width -> bytes of a group of that many runs
    unpack: Callable  # (builder, group pointer, width) -> GroupWeights
    widths: tuple  # the group widths a row can have
    has_mins: bool = False  # Q4_K: values d * sc * q - dmin * m
    unpack_folded: Callable | None = None  # (builder, group pointer, 4 or 2) -> a folded group's GroupWeights
    max_weight: int = 255  # the largest unsigned quant: how many slices' 16-bit products the avx2 dots may add
    loads_mins: bool = False  # its min factors are loaded as they lie (Q4_1's f16 mins), not unpacked (Q4_K's)

    @property
    def num_slices(self):
        return self.run_values // 4


RUN_FORMATS = {
    qt.R_Q5_0: RunFormat(32, ZERO_POINTS[qt.R_Q5_0], lambda width: 22 * width, _q5_0_group, (16, 8, 4, 2),
                         unpack_folded=_q5_0_folded, max_weight=31),
    qt.R_Q4_0: RunFormat(32, ZERO_POINTS[qt.R_Q4_0], lambda width: 18 * width, _q4_0_group, (16, 8, 4, 2),
                         unpack_folded=_q4_0_folded, max_weight=15),
    qt.R_Q4_K: RunFormat(32, ZERO_POINTS[qt.R_Q4_K], lambda width: 18 * width, _q4_k_group, (16, 8), True,
                         max_weight=15),
    qt.R_Q6_K: RunFormat(16, ZERO_POINTS[qt.R_Q6_K], lambda width: 210, _q6_k_group, (16,), max_weight=63),
    qt.R_Q4_1: RunFormat(32, ZERO_POINTS[qt.R_Q4_1], lambda width: 20 * width, _q4_1_group, (16, 8, 4, 2), True,
                         unpack_folded=_q4_1_folded, max_weight=15, loads_mins=True),
    qt.R_Q8_0: RunFormat(32, ZERO_POINTS[qt.R_Q8_0], lambda width: 34 * width, _q8_0_group, (16, 8, 4, 2),
                         unpack_folded=_q8_0_folded),
}


def _padded(builder, vector, count):
    """A vector as `count` lanes (at least its own), zero above."""
    width = vector.type.count
    if width == count:
        return vector
    indices = list(range(width)) + [width] * (count - width)  # lane `width`: the zero vector's first
    return builder.shuffle_vector(vector, ir.Constant(vector.type, None), ir.Constant(_ints(count), indices))


def _token_pointers(context, builder, x_types, x_arrays, first_token, num_tokens):
    """Per token t: (quants byte pointer, scales float*, starts int*, sums float*) of token first_token + t."""
    pointers = []
    for t in range(num_tokens):
        token = builder.add(first_token, _I64(t))
        quants = row_pointer(context, builder, x_types[0], x_arrays[0], token)
        others = [builder.bitcast(row_pointer(context, builder, array_type, array, token), element.as_pointer())
                  for array_type, array, element in zip(x_types[1:], x_arrays[1:], (_F32, _I32, _F32))]
        pointers.append((quants, *others))
    return pointers


def _emit_row_range(run_format, num_tokens, lane_dot, context, builder, signature, args):
    """out[first_token + t, row] for rows first_row..stop_row-1, one row at a time (the token pointers once)."""
    arg_types = signature.args
    data, first_row, stop_row, x_arrays, first_token, out, prefetch_bytes = (
        args[0], args[1], args[2], args[3:7], args[7], args[8], args[9])
    xs = _token_pointers(context, builder, arg_types[3:7], x_arrays, first_token, num_tokens)
    num_runs = builder.extract_value(context.make_array(arg_types[4])(context, builder, x_arrays[1]).shape, 1)
    out_rows = [row_pointer(context, builder, arg_types[8], out, builder.add(first_token, _I64(t)))
                for t in range(num_tokens)]
    out_stride = builder.extract_value(context.make_array(arg_types[8])(context, builder, out).strides, 1)
    with cgutils.for_range(builder, builder.sub(stop_row, first_row)) as loop:
        row = builder.add(first_row, loop.index)
        totals = _row_dots(run_format, row_pointer(context, builder, arg_types[0], data, row), xs, num_runs,
                           lane_dot, builder, prefetch_bytes)
        for t, total in enumerate(totals):
            element = builder.gep(out_rows[t], [builder.mul(row, out_stride)])
            builder.store(total, builder.bitcast(element, _F32.as_pointer()))
    return context.get_dummy_value()


def _run_ints(builder, lane_dot, weights, x_values, starts, width, max_weight):
    """The width runs' integer dots (+ starts) of an unfolded group with one token's x slices at x_values."""
    x_slices = [load_vector(builder, builder.gep(x_values, [_I64(4 * width * j)]), _bytes(width))
                for j in range(len(weights.slices))]
    return lane_dot.sum_slices(builder, starts, list(zip(weights.slices, x_slices)), max_weight)


def _add_products(builder, accumulator, a, b, register_lanes):
    """accumulator (16 float lanes) += a * b: one FMA for a full group. A narrower product, with 8-lane registers,
    into the low 8 lanes alone (one FMA for 8 lanes, a multiply and an add for fewer: the high register is left as
    it is); with 16-lane registers padded with zeros (a multiply and an add). Adding zeros leaves a lane's bits as
    they are (no lane is ever -0.0: they start from +0.0), so both give the same bits for the same products."""
    if a.type.count == GROUP_RUNS:
        builder.store(fma(builder, a, b, builder.load(accumulator)), accumulator)
        return
    lanes = builder.load(accumulator)
    if register_lanes == GROUP_RUNS:
        builder.store(builder.fadd(lanes, _padded(builder, builder.fmul(a, b), GROUP_RUNS)), accumulator)
        return
    low = builder.shuffle_vector(lanes, lanes, ir.Constant(_ints(HALF_RUNS), list(range(HALF_RUNS))))
    if a.type.count == HALF_RUNS:
        low = fma(builder, a, b, low)
    else:
        low = builder.fadd(low, _padded(builder, builder.fmul(a, b), HALF_RUNS))
    wide = _padded(builder, low, GROUP_RUNS)
    builder.store(builder.shuffle_vector(wide, lanes, ir.Constant(_ints(GROUP_RUNS), list(range(HALF_RUNS)) + list(
        range(GROUP_RUNS + HALF_RUNS, 2 * GROUP_RUNS)))), accumulator)


def _sweeps_mins(run_format, lane_dot):
    """Whether a row's full groups' mins go in a sweep of their own after the groups' dots (_full_group_mins), at
    every token count: the avx2 kind's, whose multi-token passes go by halves. Elsewhere each group adds its mins
    right after its dots, from the same unpacked header (Q4_K's 6-bit scales and mins: a sweep of their own
    unpacked them twice, Gemma 3 270M pp512 ~0.9x), and the avxvnni kind's half groups each add their half of the
    mins (_half_group_step), which keeps every lane's operations in the 1-token loop's order. On the avx2 kind
    that cost the 8-token passes more than the sweep (SmolLM2 Q4_1, 1 thread, Intel Xeon at the avxvnni tier,
    in-process: 1536x576 105.7 -> 112.5 us, 576x1536 86.4 -> 95.5); on the avxvnni kind the sweep cost the 1-token
    loop more (14.1 -> 15.3 us, 12.7 -> 13.5) than the mins in the halves cost 8 tokens (90.2 -> 93.0, 76.9 ->
    81.5 us)."""
    return run_format.has_mins and lane_dot.kind == AVX2 and _has_half_group_passes(run_format, lane_dot)


def _goes_by_halves(run_format, lane_dot, num_tokens):
    """Whether the full groups go half group by half group: multi-token passes where _has_half_group_passes. One
    token keeps the plain loop (its time is the weight stream)."""
    return num_tokens > 1 and _has_half_group_passes(run_format, lane_dot)


def _has_half_group_passes(run_format, lane_dot):
    """Whether this format's multi-token passes go half group by half group: on 256-bit registers (the avx2 and
    avxvnni kinds) a 16-run group's 8 slices (16 ymm) and a pass's accumulators cannot all stay in registers (Q4_1's
    8-token group loop: 155 spill moves in 568 instructions, a load each beside the x operands); a half group's 8
    vectors mostly can (46 in 459). Q6_K's 4 slices already fit (8 ymm), and unpacking them twice costs more than
    its spills (384 instructions against 337). The avxvnni kind (vpdpbusd ymm) went by whole groups until the
    twenty-first session: 8 tokens, 1 thread, Intel Xeon at the avxvnni tier, in-process A/B (two runs): SmolLM2
    Q4_1 1536x576 101-122 -> 88-93 us, 576x1536 90-108 -> 74-82, 576x576 39-49 -> 35, its Q8_0 head 49152x576
    3268 -> 3021; Gemma 3 Q5_0 2048x640 164 -> 135, Q4_K 640x2048 134 -> 117 (1 token the same: _sweeps_mins)."""
    return lane_dot.kind in (AVX2, AVXVNNI) and run_format.num_slices == 8


def _half(builder, vector, half):
    """Lanes half * n/2 .. (half + 1) * n/2 - 1 of an n-lane vector."""
    count = vector.type.count // 2
    return builder.shuffle_vector(vector, vector, ir.Constant(_ints(count), list(range(half * count,
                                                                                       (half + 1) * count))))


def _half_group_step(run_format, lane_dot, builder, group, first_run, half, xs, accumulators):
    """accumulators[t] (HALF_RUNS float lanes) += the dots of half group `half` of the full group at `group` (first
    run first_run) with each token of xs, lane for lane the operations group_step does on those lanes."""
    weights = run_format.unpack(builder, group, GROUP_RUNS)
    slices = [_half(builder, w_slice, half) for w_slice in weights.slices]
    scales = _half(builder, weights.scales, half)
    first_lane = builder.add(first_run, _I64(HALF_RUNS * half))
    value_offset = builder.mul(first_run, _I64(run_format.run_values))
    with_mins = run_format.has_mins and not _sweeps_mins(run_format, lane_dot)  # the avxvnni kind's
    minus_factors = _half(builder, builder.fneg(weights.min_factors), half) if with_mins else None
    for (quants, x_scales, starts, sums), accumulator in zip(xs, accumulators):
        x_values = builder.gep(quants, [value_offset])
        x_slices = [load_vector(builder, builder.gep(x_values, [_I64(4 * GROUP_RUNS * j + 4 * HALF_RUNS * half)]),
                                _bytes(HALF_RUNS)) for j in range(len(slices))]
        run_starts = (load_vector(builder, builder.gep(starts, [first_lane]), _ints(HALF_RUNS), align=4)
                      if lane_dot.uses_starts else ir.Constant(_ints(HALF_RUNS), None))
        run_ints = lane_dot.sum_slices(builder, run_starts, list(zip(slices, x_slices)), run_format.max_weight)
        products = builder.fmul(scales, load_vector(builder, builder.gep(x_scales, [first_lane]), _floats(HALF_RUNS),
                                                    align=4))
        builder.store(fma(builder, builder.sitofp(run_ints, _floats(HALF_RUNS)), products,
                           builder.load(accumulator)), accumulator)
        if with_mins:
            x_sums = load_vector(builder, builder.gep(sums, [first_lane]), _floats(HALF_RUNS), align=4)
            builder.store(fma(builder, minus_factors, x_sums, builder.load(accumulator)), accumulator)


def _full_groups_by_halves(run_format, row, xs, full_groups, lane_dot, builder, prefetch_bytes, accumulators):
    """The full groups' dots of a row with every token of xs into its 16-lane accumulators, the same float
    operations lane for lane as group_step's loop (so the same bits), in two sweeps of the row's groups: the low
    half groups, then the high ones. The row (under 2 KiB) stays in L1 between sweeps (and for the mins' sweep
    after them); the first prefetches the row stream."""
    group_bytes = run_format.group_bytes(GROUP_RUNS)
    zero8 = ir.Constant(_floats(HALF_RUNS), None)
    halves = []
    for half in range(2):
        half_accumulators = [cgutils.alloca_once_value(builder, zero8) for _ in xs]
        with cgutils.for_range(builder, full_groups) as loop:
            group = builder.gep(row, [builder.mul(loop.index, _I64(group_bytes))])
            if half == 0:
                for line in range(0, group_bytes, _CACHE_LINE):
                    prefetch(builder, builder.gep(group, [builder.add(prefetch_bytes, _I64(line))]))
            _half_group_step(run_format, lane_dot, builder, group, builder.mul(loop.index, _I64(GROUP_RUNS)), half,
                             xs, half_accumulators)
        halves.append([builder.load(accumulator) for accumulator in half_accumulators])
    for t, (low, high) in enumerate(zip(*halves)):
        builder.store(concat(builder, low, high), accumulators[t])


def _full_group_mins(run_format, row, xs, full_groups, builder, accumulators):
    """accumulators[t] -= the full groups' min factors * token t's x run sums (Q4_1, Q4_K), one FMA a group, in a
    sweep of their own after the groups' dots (_sweeps_mins). Several tokens go half group by half group, like
    their dots: 8 tokens' 16-lane accumulators and the factors are 17 ymm, one more than AVX2 has (LLVM rotated 16
    of them through the registers each group: 59 instructions a group instead of ~20); each lane gets the same FMAs
    in the same order either way. Q4_K's mins (unpacked from 6 bits, ~15 operations a group) keep one sweep:
    unpacking them twice cost more than the rotation (Gemma 3 270M 640x1024 at 8 tokens ~1.05x the time)."""
    group_bytes = run_format.group_bytes(GROUP_RUNS)
    halves = range(2) if len(xs) > 1 and run_format.loads_mins else (None,)
    loaded = [builder.load(accumulator) for accumulator in accumulators]
    parts = []
    for half in halves:
        lanes = GROUP_RUNS if half is None else HALF_RUNS
        part_accumulators = [cgutils.alloca_once_value(builder, value if half is None else _half(builder, value, half))
                             for value in loaded]
        with cgutils.for_range(builder, full_groups) as loop:
            group = builder.gep(row, [builder.mul(loop.index, _I64(group_bytes))])
            minus_factors = builder.fneg(run_format.unpack(builder, group, GROUP_RUNS).min_factors)  # slices: dead
            first_lane = builder.mul(loop.index, _I64(GROUP_RUNS))
            if half is not None:
                minus_factors = _half(builder, minus_factors, half)
                first_lane = builder.add(first_lane, _I64(HALF_RUNS * half))
            for (_, _, _, sums), accumulator in zip(xs, part_accumulators):
                x_sums = load_vector(builder, builder.gep(sums, [first_lane]), _floats(lanes), align=4)
                builder.store(fma(builder, minus_factors, x_sums, builder.load(accumulator)), accumulator)
        parts.append([builder.load(accumulator) for accumulator in part_accumulators])
    for t, accumulator in enumerate(accumulators):
        builder.store(parts[0][t] if half is None else concat(builder, parts[0][t], parts[1][t]), accumulator)


def _row_dots(run_format, row, xs, num_runs, lane_dot, builder, prefetch_bytes):
    """The dots of the row at `row` with each token of xs."""
    zero16 = ir.Constant(_floats(16), None)
    accumulators = [cgutils.alloca_once_value(builder, zero16) for _ in xs]  # the mins go in too (one lane tree
    # a row, not two; an 8-token pass holds 8 vectors fewer. Q4_1 at 8 tokens, 1 thread, AMD EPYC Zen 4, vnni512,
    # min of 300, alternating: 1536x576 94.5 -> 76.1 us, 576x1536 76.2 -> 66.7, 576x576 39.5 -> 32.2)
    sweeps_mins = _sweeps_mins(run_format, lane_dot)
    register_lanes = folded_lanes(lane_dot.kind)  # a folded group's dots' lanes; how narrower products are added

    def group_step(first_run, byte_offset, width, with_mins):
        """The group of `width` runs starting at run first_run (byte_offset into the row); its lines
        prefetch_bytes further on in the row stream are prefetched (0: these, already in L1, for later tokens)."""
        group_bytes = run_format.group_bytes(width)
        value_offset = builder.mul(first_run, _I64(run_format.run_values))
        group = builder.gep(row, [byte_offset])
        for line in range(0, group_bytes, _CACHE_LINE):
            prefetch(builder, builder.gep(group, [builder.add(prefetch_bytes, _I64(line))]))
        if width <= FOLDED_WIDTH and run_format.unpack_folded is not None:
            weights = run_format.unpack_folded(builder, group, width)
        else:
            weights = run_format.unpack(builder, group, width)
        for t, (quants, scales, starts, sums) in enumerate(xs):
            x_values = builder.gep(quants, [value_offset])
            run_starts = (load_vector(builder, builder.gep(starts, [first_run]), _ints(width), align=4)
                          if lane_dot.uses_starts else ir.Constant(_ints(width), None))
            x_scales = load_vector(builder, builder.gep(scales, [first_run]), _floats(width), align=4)
            acc = accumulators[t]
            if weights.is_folded:  # lanes of partial run dots, each lane with its run's scales
                lanes = builder.sitofp(_folded_run_ints(builder, lane_dot, weights, x_values, run_starts,
                                                        run_format.max_weight), _floats(register_lanes))
                lane_products = _repeated(builder, builder.fmul(weights.scales, x_scales), register_lanes)
                _add_products(builder, acc, lanes, lane_products, register_lanes)
            else:
                run_dots = builder.sitofp(_run_ints(builder, lane_dot, weights, x_values, run_starts, width,
                                                    run_format.max_weight), _floats(width))
                _add_products(builder, acc, run_dots, builder.fmul(weights.scales, x_scales), register_lanes)
            if with_mins and run_format.has_mins:
                x_sums = load_vector(builder, builder.gep(sums, [first_run]), _floats(width), align=4)
                _add_products(builder, acc, builder.fneg(weights.min_factors), x_sums, register_lanes)

    full_groups = builder.udiv(num_runs, _I64(GROUP_RUNS))
    if _goes_by_halves(run_format, lane_dot, len(xs)):
        _full_groups_by_halves(run_format, row, xs, full_groups, lane_dot, builder, prefetch_bytes, accumulators)
    else:
        with cgutils.for_range(builder, full_groups) as loop:
            offset = builder.mul(loop.index, _I64(run_format.group_bytes(GROUP_RUNS)))
            group_step(builder.mul(loop.index, _I64(GROUP_RUNS)), offset, GROUP_RUNS, not sweeps_mins)
    if sweeps_mins:
        _full_group_mins(run_format, row, xs, full_groups, builder, accumulators)
    runs_done = builder.mul(full_groups, _I64(GROUP_RUNS))
    bytes_done = builder.mul(full_groups, _I64(run_format.group_bytes(GROUP_RUNS)))
    for width in run_format.widths[1:]:  # the tail: at most one group of each narrower width
        runs_left = builder.sub(num_runs, runs_done)
        has_group = builder.icmp_signed(">=", runs_left, _I64(width))
        with builder.if_then(has_group):
            group_step(runs_done, bytes_done, width, True)
        runs_done = builder.select(has_group, builder.add(runs_done, _I64(width)), runs_done)
        bytes_done = builder.select(has_group, builder.add(bytes_done, _I64(run_format.group_bytes(width))),
                                    bytes_done)
    return lane_totals(builder, [builder.load(accumulator) for accumulator in accumulators])


def row_range_intrinsic(code, num_tokens, kind=None):
    """Dots of rows first_row..stop_row-1 of run code `code` x num_tokens tokens, written to out[token, row], with
    the lane dot of `kind` (ir/byte_dot.py; None: the best the target compiles for; tests compare the kinds)."""
    run_format = RUN_FORMATS[code]

    @intrinsic
    def row_range_dots(typingctx, data, first_row, stop_row, x_quants, x_scales, x_starts, x_sums, first_token, out,
                       prefetch_bytes):
        """out[first_token + t, r] = dot(row r of data, x[first_token + t]) for first_row <= r < stop_row, t <
        num_tokens, the same operations per (row, token) whatever num_tokens (out: float32 [n, rows]); data: uint8
        [rows, bytes] in the run layout, x: run_matvec.run_activations."""
        if not (isinstance(data, types.Array) and data.ndim == 2 and isinstance(out, types.Array) and out.ndim == 2
                and out.dtype == types.float32):
            return None

        def codegen(context, builder, signature, args):
            lane_dot = (best_byte_dot(context, run_format.zero_point) if kind is None
                        else byte_dot(kind, run_format.zero_point))
            return _emit_row_range(run_format, num_tokens, lane_dot, context, builder, signature, args)

        return (types.void(data, first_row, stop_row, x_quants, x_scales, x_starts, x_sums, first_token, out,
                           prefetch_bytes), codegen)

    return row_range_dots


@intrinsic
def run_row_range(typingctx, code, num_tokens, data, first_row, stop_row, x_quants, x_scales, x_starts, x_sums,
                  first_token, out, prefetch_bytes):
    """row_range_intrinsic(code, num_tokens)'s dots for a literal run code and token count (a leaf compiled per
    pair: run_matvec.run_rows_into), so a kernel branching on its code emits only its own type's IR."""
    if not (isinstance(code, types.IntegerLiteral) and isinstance(num_tokens, types.IntegerLiteral)
            and code.literal_value in RUN_FORMATS and isinstance(data, types.Array) and data.ndim == 2
            and isinstance(out, types.Array) and out.ndim == 2 and out.dtype == types.float32):
        return None
    run_format, count = RUN_FORMATS[code.literal_value], num_tokens.literal_value

    def codegen(context, builder, signature, args):
        inner = types.void(*signature.args[2:])
        lane_dot = best_byte_dot(context, run_format.zero_point)
        return _emit_row_range(run_format, count, lane_dot, context, builder, inner, args[2:])

    return (types.void(code, num_tokens, data, first_row, stop_row, x_quants, x_scales, x_starts, x_sums,
                       first_token, out, prefetch_bytes), codegen)
