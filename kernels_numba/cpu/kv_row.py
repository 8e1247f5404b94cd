"""One head's row of the KV cache (kv_type.py): written from float32, read back as float32, for every KV type.

Encoding does reference_kv's float32 operations in its order (no fastmath), so the bytes equal the oracle's.
`store_kv_row` / `kv_row` are the cache's accessors for the kernels: chosen by the cache's dtype when a kernel
compiles, so a float32 cache is read in place exactly as before and a byte cache (any other type) costs one
branch on the type code per row; attention decodes rows one at a time, never the whole context.
"""
import functools
import math

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from kernels_numba.cpu.ir.half import half_bits_to_float32, read_half
from kernels_numba.cpu.ir.vector_ir import F32, I8, I32, I64, data_pointer, is_contiguous_1d, load_half, load_vector
from kernels_numba.cpu.matvec.block_decode import decode_bf16, decode_q4_0
from kernels_numba.kv_type import (BF16, F16, FP8, MAX_Q4_0_OUTLIER_WIDTH, Q4_0, Q4_0_NUMERATORS,
                                   Q4_0_OUTLIER_BYTES, Q8_0, VALUES_PER_BLOCK)

E4M3_MAX = np.float32(448.0)
HADAMARD_SCALE = np.float32(1.0 / np.sqrt(VALUES_PER_BLOCK))
E4M3_MIN_NORMAL = 2.0 ** -6
_HALF = np.float32(0.5)


@intrinsic
def float32_to_half_bits(typingctx, value):
    """The IEEE fp16 bits (uint16) nearest a float32 (round to nearest even, as numpy's astype(float16))."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(value), codegen


@intrinsic
def float32_bits(typingctx, value):
    """The IEEE bit pattern of a float32, as uint32."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(value), codegen


@njit(cache=True, inline="always")
def _write_half(row, offset, value):
    bits = float32_to_half_bits(value)
    row[offset], row[offset + 1] = np.uint8(bits & 0xFF), np.uint8(bits >> 8)


@njit(cache=True, inline="always")
def _round_away(v):
    return np.float32(math.copysign(math.floor(abs(v) + _HALF), v))


@njit(cache=True, inline="always")
def _inverse(d):
    return np.float32(1.0) / d if d != 0 else np.float32(0.0)


@njit(cache=True)
def _encode_q8_0(values, row):
    for blk in range(values.size // VALUES_PER_BLOCK):
        first, base = VALUES_PER_BLOCK * blk, 34 * blk
        amax = np.float32(0.0)
        for j in range(VALUES_PER_BLOCK):
            amax = max(amax, abs(values[first + j]))
        d = amax / np.float32(127.0)
        inverse = _inverse(d)
        _write_half(row, base, d)
        for j in range(VALUES_PER_BLOCK):
            row[base + 2 + j] = np.uint8(np.int32(_round_away(values[first + j] * inverse)) & 0xFF)


@njit(cache=True)
def hadamard_block(x, first):
    """x[first:first+32] -> its orthonormal Walsh-Hadamard transform, in place (reference_kv.hadamard_blocks: the
    same butterflies in the same order, so the same float32 bits)."""
    span = 1
    while span < VALUES_PER_BLOCK:
        for start in range(first, first + VALUES_PER_BLOCK, 2 * span):
            for j in range(start, start + span):
                low, high = x[j], x[j + span]
                x[j], x[j + span] = low + high, low - high
        span *= 2
    for j in range(first, first + VALUES_PER_BLOCK):
        x[j] *= HADAMARD_SCALE


@njit(cache=True)
def _q4_0_fit(block, iscale):
    """sum(x * code) in float64 and sum(code^2) of the codes round(x * iscale) clamped to [-8, 7]
    (reference_kv.q4_0_fit)."""
    sumlx, suml2 = 0.0, 0
    for j in range(VALUES_PER_BLOCK):
        code = min(7, max(-8, np.int32(_round_away(block[j] * iscale))))
        sumlx += float(block[j]) * code
        suml2 += code * code
    return sumlx, suml2


@njit(cache=True, inline="always")
def q4_0_outliers(width):
    """kv_type.q4_0_outliers, in compiled code."""
    return width // 80 if width <= MAX_Q4_0_OUTLIER_WIDTH else 0


@njit(cache=True)
def _take_q4_0_outliers(values, row, rest):
    """rest = values with the row's q4_0_outliers values of largest magnitude zeroed (largest first, the lower
    position among equals: reference_kv.q4_0_outlier_positions), each written after the blocks as f16 | index."""
    width = values.size
    base = 18 * (width // VALUES_PER_BLOCK)
    for j in range(width):
        rest[j] = values[j]
    for k in range(q4_0_outliers(width)):
        best, best_size = -1, np.float32(0.0)
        for j in range(width):  # a taken position is zeroed, but a zero may still tie: skip those taken
            taken = False
            for t in range(k):
                taken = taken or row[base + Q4_0_OUTLIER_BYTES * t + 2] == j
            if not taken and (best < 0 or abs(values[j]) > best_size):
                best, best_size = j, abs(values[j])
        _write_half(row, base + Q4_0_OUTLIER_BYTES * k, values[best])
        row[base + Q4_0_OUTLIER_BYTES * k + 2] = np.uint8(best)
        rest[best] = np.float32(0.0)


@njit(cache=True)
def _encode_q4_0(values, row):
    """reference_kv._quantize_q4_0_rows: outliers apart; of the rest, each block's Hadamard transform with the best
    of make_qx_quants' scales."""
    rest = np.empty(values.size, dtype=np.float32)
    _take_q4_0_outliers(values, row, rest)
    rotated = np.empty(VALUES_PER_BLOCK, dtype=np.float32)
    for blk in range(values.size // VALUES_PER_BLOCK):
        first, base = VALUES_PER_BLOCK * blk, 18 * blk
        for j in range(VALUES_PER_BLOCK):
            rotated[j] = rest[first + j]
        hadamard_block(rotated, 0)
        amax, peak = np.float32(0.0), rotated[0]  # the first value of largest magnitude, as llama.cpp
        for j in range(VALUES_PER_BLOCK):
            if abs(rotated[j]) > amax:
                amax, peak = abs(rotated[j]), rotated[j]
        safe_peak = peak if peak != 0 else np.float32(1.0)
        best_score, best_iscale, d = -1.0, np.float32(0.0), np.float32(0.0)
        for numerator in Q4_0_NUMERATORS:
            iscale = numerator / safe_peak
            sumlx, suml2 = _q4_0_fit(rotated, iscale)
            score = sumlx * sumlx / suml2 if suml2 > 0 else 0.0
            if score > best_score:
                best_score, best_iscale = score, iscale
                d = np.float32(sumlx / suml2) if suml2 > 0 else np.float32(0.0)
        _write_half(row, base, d)
        for j in range(VALUES_PER_BLOCK // 2):
            low = min(7, max(-8, np.int32(_round_away(rotated[j] * best_iscale)))) + 8
            high = min(7, max(-8, np.int32(_round_away(rotated[16 + j] * best_iscale)))) + 8
            row[base + 2 + j] = np.uint8(low | (high << 4))


@njit(cache=True, inline="always")
def e4m3_code(v):
    """float32 -> E4M3 byte, rounded half away from zero, saturating at 448 (reference_kv.e4m3_codes)."""
    a = min(float(abs(v)), 448.0)
    if a < E4M3_MIN_NORMAL:
        code = np.int32(math.floor(a * 512.0 + 0.5))
    else:
        mantissa, exponent = math.frexp(a)
        steps = np.int32(math.floor(mantissa * 16.0 + 0.5)) - 8
        code = min((exponent + 6) * 8 + steps, 0x7E)  # steps == 8 carries into the exponent by itself
    return np.uint8(code | (0x80 if v < 0 or (v == 0 and math.copysign(1.0, v) < 0) else 0))


@njit(cache=True)
def _encode_fp8(values, row):
    for blk in range(values.size // VALUES_PER_BLOCK):
        first, base = VALUES_PER_BLOCK * blk, 34 * blk
        amax = np.float32(0.0)
        for j in range(VALUES_PER_BLOCK):
            amax = max(amax, abs(values[first + j]))
        bits = float32_to_half_bits(amax / E4M3_MAX)
        d = half_bits_to_float32(bits)
        row[base], row[base + 1] = np.uint8(bits & 0xFF), np.uint8(bits >> 8)
        inverse = _inverse(d)
        for j in range(VALUES_PER_BLOCK):
            row[base + 2 + j] = e4m3_code(values[first + j] * inverse)


@njit(cache=True)
def _encode_halves(values, kv_type, row):
    for j in range(values.size):
        if kv_type == F16:
            bits = np.uint32(float32_to_half_bits(values[j]))
        else:  # bf16: round to nearest even; NaN stays a quiet NaN
            x = float32_bits(values[j])
            bits = np.uint32(0x7FC0) if values[j] != values[j] else (x + np.uint32(0x7FFF) + ((x >> 16) & 1)) >> 16
        row[2 * j], row[2 * j + 1] = np.uint8(bits & 0xFF), np.uint8((bits >> 8) & 0xFF)


@njit(cache=True)
def encode_kv_row(values, kv_type, row):
    """values: float32 [width] -> row: uint8 [row_bytes] of KV type kv_type (not F32)."""
    if kv_type == Q8_0:
        _encode_q8_0(values, row)
    elif kv_type == Q4_0:
        _encode_q4_0(values, row)
    elif kv_type == FP8:
        _encode_fp8(values, row)
    else:
        _encode_halves(values, kv_type, row)


HALVES_AT_ONCE = 16  # fp16 values one vector conversion reads (a 512-bit register of float32)
_HALF_BITS = ir.VectorType(ir.IntType(16), HALVES_AT_ONCE)
_HALVES = ir.VectorType(ir.HalfType(), HALVES_AT_ONCE)
_HALF_FLOATS = ir.VectorType(F32, HALVES_AT_ONCE)
_BLOCK_CODES = ir.VectorType(I8, VALUES_PER_BLOCK)
_BLOCK_FLOATS = ir.VectorType(F32, VALUES_PER_BLOCK)


def _index(context, builder, value, value_type):
    return context.cast(builder, value, value_type, types.int64)


@intrinsic
def halves_into(typingctx, row, out, first):
    """out[first:first+16] = the fp16 values at row bytes 2*first.. as float32: one vector load and conversion
    (vcvtph2ps), where a loop of read_half assembled each value from two bytes (attention at 2,000 keys decodes
    4,000 rows a token)."""
    if not (is_contiguous_1d(row, (types.uint8,)) and is_contiguous_1d(out, (types.float32,))
            and isinstance(first, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        row_type, out_type, first_type = signature.args
        at = _index(context, builder, args[2], first_type)
        source = builder.gep(data_pointer(context, builder, row_type, args[0], I8), [builder.mul(at, I64(2))])
        values = builder.fpext(builder.bitcast(load_vector(builder, source, _HALF_BITS), _HALVES), _HALF_FLOATS)
        target = builder.gep(data_pointer(context, builder, out_type, args[1], F32), [at])
        builder.store(values, builder.bitcast(target, _HALF_FLOATS.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(row, out, first), codegen


@intrinsic
def q8_0_block_into(typingctx, row, base, out, first):
    """out[first:first+32] = the q8_0 block at row byte `base` (d f16 | 32 int8) as float32 code * d, in vectors:
    the same products as block_decode.decode_q8_0, whose per-block loop LLVM vectorised behind an alias check."""
    if not (is_contiguous_1d(row, (types.uint8,)) and is_contiguous_1d(out, (types.float32,))
            and isinstance(base, types.Integer) and isinstance(first, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        row_type, base_type, out_type, first_type = signature.args
        block = builder.gep(data_pointer(context, builder, row_type, args[0], I8),
                            [_index(context, builder, args[1], base_type)])
        d = builder.insert_element(ir.Constant(_BLOCK_FLOATS, ir.Undefined), load_half(builder, block), I32(0))
        d = builder.shuffle_vector(d, ir.Constant(_BLOCK_FLOATS, ir.Undefined),
                                   ir.Constant(ir.VectorType(I32, VALUES_PER_BLOCK), [0] * VALUES_PER_BLOCK))
        codes = load_vector(builder, builder.gep(block, [I64(2)]), _BLOCK_CODES)
        target = builder.gep(data_pointer(context, builder, out_type, args[2], F32),
                             [_index(context, builder, args[3], first_type)])
        builder.store(builder.fmul(builder.sitofp(codes, _BLOCK_FLOATS), d),
                      builder.bitcast(target, _BLOCK_FLOATS.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(row, base, out, first), codegen


@njit(cache=True, inline="always")  # in decode_kv_row's codec and in decoded_row_into
def decode_f16(row, out):
    whole = out.size - out.size % HALVES_AT_ONCE
    for first in range(0, whole, HALVES_AT_ONCE):
        halves_into(row, out, first)
    for j in range(whole, out.size):  # an f16 row need not be whole vectors
        out[j] = read_half(row, 2 * j)


@njit(cache=True, inline="always")
def decode_q8_0(row, out):
    for blk in range(out.size // VALUES_PER_BLOCK):
        q8_0_block_into(row, 34 * blk, out, VALUES_PER_BLOCK * blk)


@njit(cache=True)
def decode_fp8(row, out):
    for blk in range(out.size // VALUES_PER_BLOCK):
        first, base = VALUES_PER_BLOCK * blk, 34 * blk
        d = read_half(row, base) * np.float32(256.0)  # the fp16 bits below are the E4M3 value / 256
        for j in range(VALUES_PER_BLOCK):
            code = np.int32(np.int8(row[base + 2 + j]))
            out[first + j] = half_bits_to_float32((code << 7) & 0xBF80) * d


@njit(cache=True)
def decode_kv_row(row, kv_type, out):
    """row: uint8 [row_bytes] of KV type kv_type (not F32) -> out: float32 [width]."""
    if kv_type == F16:
        decode_f16(row, out)
    elif kv_type == BF16:
        decode_bf16(row, out)
    elif kv_type == Q8_0:
        decode_q8_0(row, out)
    elif kv_type == Q4_0:
        decode_q4_0(row, out)  # the blocks (it reads whole blocks; the outliers' bytes follow them)
        for first in range(0, out.size, VALUES_PER_BLOCK):  # stored as the blocks' transforms
            hadamard_block(out, first)
        base = 18 * (out.size // VALUES_PER_BLOCK)
        for k in range(q4_0_outliers(out.size)):
            out[row[base + Q4_0_OUTLIER_BYTES * k + 2]] = read_half(row, base + Q4_0_OUTLIER_BYTES * k)
    else:
        decode_fp8(row, out)



# ---- the row codecs as two external functions, compiled once ----------------------------------------------------
# Inlined, decode_kv_row and encode_kv_row (every type's code behind a branch on the type) were compiled again into
# each kernel that reads or writes the cache (attention's 12 row reads, decode_layer, store_kv): 5-8 s of a fresh
# install's first run. As C-callable functions (cfunc, cached like any kernel) whose addresses are in LLVM's symbol
# table, callers hold one call by name, which a kernel loaded from the cache links again in each process. They are
# taken for the C-contiguous rows the cache gives; other layouts keep the inlined code.
DECODE_SYMBOL, ENCODE_SYMBOL = "pocketllm_kv_decode_row", "pocketllm_kv_encode_row"
_ROW_CALL = types.void(types.CPointer(types.uint8), types.int64, types.int64, types.CPointer(types.float32),
                       types.int64)  # (row bytes, row_bytes, kv_type, float32 values, width)


# Compiled (or loaded) when registered, not at import: a first run's side child imports the kernels with the
# registration deferred (kernels_numba.cpu: DEFER_ROW_CODECS_ENV) and compiles the decode step's mat-vec leaves
# first, while the chain compiles these (~4 s on a 2-vCPU AMD EPYC Zen 3): both had started with them, one waiting
# for the other's compile (compile_lock.py), one core idle.
def _decode_row(row, row_bytes, kv_type, out, width):
    decode_kv_row(carray(row, row_bytes), kv_type, carray(out, width))


def _encode_row(row, row_bytes, kv_type, values, width):
    encode_kv_row(carray(values, width), kv_type, carray(row, row_bytes))


@functools.cache
def row_codecs() -> tuple:
    """The two codecs (decode, encode) as C-callable functions, compiled or loaded from the cache once."""
    return cfunc(_ROW_CALL, cache=True)(_decode_row), cfunc(_ROW_CALL, cache=True)(_encode_row)


def register_row_codecs() -> None:
    """Put the two codecs' addresses in LLVM's symbol table (compiling them, or loading them from the cache):
    before any kernel that calls them compiles or loads. Once a process: later calls do nothing."""
    decode, encode = row_codecs()
    if llvm.address_of_symbol(DECODE_SYMBOL) != decode.address:
        llvm.add_symbol(DECODE_SYMBOL, decode.address)
        llvm.add_symbol(ENCODE_SYMBOL, encode.address)


def _call_row_codec(symbol: str):
    @intrinsic
    def call(typingctx, row, kv_type, values):
        """symbol(row, kv_type, values) for a uint8 row and float32 values, both C-contiguous 1-D arrays."""
        if not (isinstance(row, types.Array) and isinstance(values, types.Array) and row.layout == "C"
                and values.layout == "C" and row.ndim == values.ndim == 1 and row.dtype == types.uint8
                and values.dtype == types.float32 and isinstance(kv_type, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            row_array = context.make_array(signature.args[0])(context, builder, args[0])
            value_array = context.make_array(signature.args[2])(context, builder, args[2])
            i64 = ir.IntType(64)
            function_type = ir.FunctionType(ir.VoidType(), [row_array.data.type, i64, i64, value_array.data.type, i64])
            function = cgutils.get_or_insert_function(builder.module, function_type, symbol)
            builder.call(function, [row_array.data, builder.extract_value(row_array.shape, 0),
                                    context.cast(builder, args[1], signature.args[1], types.int64),
                                    value_array.data, builder.extract_value(value_array.shape, 0)])
            return context.get_dummy_value()

        return types.none(row, kv_type, values), codegen

    return call


decode_row_call, encode_row_call = _call_row_codec(DECODE_SYMBOL), _call_row_codec(ENCODE_SYMBOL)


def _is_c_row(array_type) -> bool:
    return isinstance(array_type, types.Array) and array_type.layout == "C"


@njit(cache=True, inline="always")
def _copy(source, target):
    for d in range(target.size):  # element loop: see kv_store.store_kv_into
        target[d] = source[d]


@njit(cache=True)
def decoded_row_into(row, kv_type, out):
    """decode_kv_row of a C-contiguous row, for the kernels that read the cache: f16 (the commands' default KV
    type) and q8_0 here, a few vector conversions a row, the other types through the codec call (decode_row_call).
    That call cost more than decoding an f16 row: 64 values, AVX2 tier, AMD EPYC Zen 4, one thread: 32 ns a row
    through it, 10.6 ns through this function, 2.4 ns inlined by numba (inline="always"); decode attention over an
    f16 cache (3 heads a kv head, head_dim 64) 35.3 -> 19.3 ns a (head, key) at 42 keys, 21.9 -> 16.1 at 500 (an
    f32 cache 15.6 / 13.7). Inlined at every row read it was 16.6 ns but attend_heads compiled in 5.1-6.0 s of CPU
    instead of 2.0-2.6 (2.6-3.2 s as a call). The same conversions as decode_kv_row's, so the same floats."""
    if kv_type == F16:
        decode_f16(row, out)
    elif kv_type == Q8_0:
        decode_q8_0(row, out)
    else:
        decode_row_call(row, kv_type, out)


def kv_row(cache, kv_type, block, offset, head, scratch):
    """cache[block, offset, head] as float32 [width]: the row itself in a float32 cache, else decoded into
    scratch (float32 [width]) and scratch returned."""


@overload(kv_row, inline="always")
def _kv_row(cache, kv_type, block, offset, head, scratch):
    if cache.dtype == types.float32:
        return lambda cache, kv_type, block, offset, head, scratch: cache[block, offset, head]

    if _is_c_row(cache) and _is_c_row(scratch):
        def decoded_by_call(cache, kv_type, block, offset, head, scratch):
            decoded_row_into(cache[block, offset, head], kv_type, scratch)
            return scratch

        return decoded_by_call

    def decoded(cache, kv_type, block, offset, head, scratch):
        decode_kv_row(cache[block, offset, head], kv_type, scratch)
        return scratch

    return decoded


def store_kv_row(cache, kv_type, block, offset, head, values):
    """cache[block, offset, head] = values (float32 [width]), encoded to the cache's type."""


@overload(store_kv_row, inline="always")
def _store_kv_row(cache, kv_type, block, offset, head, values):
    if cache.dtype == types.float32:
        return lambda cache, kv_type, block, offset, head, values: _copy(values, cache[block, offset, head])

    if _is_c_row(cache) and _is_c_row(values):
        return lambda cache, kv_type, block, offset, head, values: encode_row_call(
            cache[block, offset, head], kv_type, values)

    def encoded(cache, kv_type, block, offset, head, values):
        encode_kv_row(values, kv_type, cache[block, offset, head])

    return encoded


def kv_row_into(cache, kv_type, block, offset, head, out):
    """out[:] = cache[block, offset, head] as float32, whatever the cache's type."""


@overload(kv_row_into, inline="always")
def _kv_row_into(cache, kv_type, block, offset, head, out):
    if cache.dtype == types.float32:
        return lambda cache, kv_type, block, offset, head, out: _copy(cache[block, offset, head], out)

    if _is_c_row(cache) and _is_c_row(out):
        return lambda cache, kv_type, block, offset, head, out: decoded_row_into(
            cache[block, offset, head], kv_type, out)

    def decoded(cache, kv_type, block, offset, head, out):
        decode_kv_row(cache[block, offset, head], kv_type, out)

    return decoded
