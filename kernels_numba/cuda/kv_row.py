"""The KV cache's types (kernels_numba/kv_type.py) on the device: one value read back as float32 from its cache row,
and a block of 32 values encoded into it, with reference_kv's float32 operations (the same bytes).

numba's CUDA target and its simulator share no bit-cast (half.py), so the fp16 / bf16 encoders round by exact
float64 arithmetic (frexp, ldexp, floor: round half to even as numpy and the CPU's fptrunc do) and the E4M3
decoder reads a table.
"""
import math

import numpy as np
from numba import cuda

from gguf_loader.fp8_layout import E4M3_TABLE
from kernels_numba.cuda.half import float_from_bits, half_to_float
from kernels_numba.kv_type import (BF16, F16, F32, FP8, MAX_Q4_0_OUTLIER_WIDTH, Q4_0, Q4_0_NUMERATORS,
                                   Q4_0_OUTLIER_BYTES, Q8_0, VALUES_PER_BLOCK, q4_0_outliers)

E4M3_VALUES = np.nan_to_num(E4M3_TABLE, nan=480.0)
MAX_Q4_0_OUTLIERS = q4_0_outliers(MAX_Q4_0_OUTLIER_WIDTH)
HADAMARD_SCALE = np.float32(1.0 / np.sqrt(VALUES_PER_BLOCK))  # 0x7f / 0xff: never written (the encoder saturates at 448)


@cuda.jit(device=True)
def read_half_at(cache, block, offset, head, at):
    """The little-endian fp16 at byte `at` of a cache row, as float32."""
    return half_to_float(np.int32(cache[block, offset, head, at]) | (np.int32(cache[block, offset, head, at + 1]) << 8))


@cuda.jit(device=True)
def kv_value(cache, kv_type, block, offset, head, d):
    """Value d of cache[block, offset, head] as float32, whatever the cache's KV type (f32: the float itself)."""
    if kv_type == F32:
        return np.float32(cache[block, offset, head, d])
    if kv_type == F16:
        return read_half_at(cache, block, offset, head, 2 * d)
    if kv_type == BF16:
        bits = np.int64(cache[block, offset, head, 2 * d]) | (np.int64(cache[block, offset, head, 2 * d + 1]) << 8)
        return float_from_bits(bits << 16)
    j = d % VALUES_PER_BLOCK
    if kv_type == Q4_0:
        return _q4_0_row_value(cache, block, offset, head, d)
    base = (d // VALUES_PER_BLOCK) * 34
    code = np.int32(cache[block, offset, head, base + 2 + j])
    if kv_type == Q8_0:
        return np.float32(code - 256 if code > 127 else code) * read_half_at(cache, block, offset, head, base)
    return E4M3_VALUES[code] * read_half_at(cache, block, offset, head, base)


@cuda.jit(device=True)
def q4_0_outlier_count(width):
    """kv_type.q4_0_outliers on the device."""
    return width // 80 if width <= MAX_Q4_0_OUTLIER_WIDTH else 0


@cuda.jit(device=True)
def _q4_0_row_value(cache, block, offset, head, d):
    """Value d of a q4_0 row: an outlier kept after the blocks (f16 | index), else its block's value."""
    width = (cache.shape[3] // 18) * VALUES_PER_BLOCK  # the outliers take less than one block
    base = 18 * (width // VALUES_PER_BLOCK)
    for k in range(q4_0_outlier_count(width)):
        at = base + Q4_0_OUTLIER_BYTES * k
        if cache[block, offset, head, at + 2] == d:
            return read_half_at(cache, block, offset, head, at)
    return _q4_0_value(cache, block, offset, head, d // VALUES_PER_BLOCK, d % VALUES_PER_BLOCK)


@cuda.jit(device=True)
def _q4_0_value(cache, block, offset, head, unit, j):
    """Value j of q4_0 block `unit`: the blocks hold Walsh-Hadamard transforms (reference_kv.hadamard_blocks), so
    value j = HADAMARD_SCALE * sum over i of (-1)^popcount(i & j) * stored value i (the same up to rounding)."""
    base = unit * 18
    d = read_half_at(cache, block, offset, head, base)
    total = np.float32(0.0)
    for i in range(VALUES_PER_BLOCK):
        byte = np.int32(cache[block, offset, head, base + 2 + i % 16])
        stored = d * np.float32(((byte & 15) if i < 16 else (byte >> 4)) - 8)
        parity, bits = 0, i & j
        while bits:
            parity ^= bits & 1
            bits >>= 1
        total += -stored if parity else stored
    return total * HADAMARD_SCALE


@cuda.jit(device=True)
def hadamard_block(x):
    """x[0:32] (a local array) -> its orthonormal Walsh-Hadamard transform, by the CPU's butterflies in its order."""
    span = 1
    while span < VALUES_PER_BLOCK:
        for start in range(0, VALUES_PER_BLOCK, 2 * span):
            for j in range(start, start + span):
                low, high = x[j], x[j + span]
                x[j], x[j + span] = low + high, low - high
        span *= 2
    for j in range(VALUES_PER_BLOCK):
        x[j] *= HADAMARD_SCALE


@cuda.jit(device=True)
def float_bits(x, mantissa_bits, min_exponent, bias, max_field):
    """The bits of the 16-bit float (sign in bit 15) with `mantissa_bits` and exponent bias `bias` nearest float x
    (round half to even; subnormals; overflow to infinity): fp16 = (10, -14, 15, 31), bf16 = (7, -126, 127, 255)."""
    sign = 1 if x < 0 or (x == 0 and math.copysign(1.0, x) < 0) else 0
    a = abs(float(x))
    if a != a:
        return (max_field << mantissa_bits) | (1 << (mantissa_bits - 1))  # a quiet NaN
    if a == 0:
        return sign << 15
    exponent = max(math.frexp(a)[1] - 1, min_exponent)  # a = m * 2^exponent, m in [1, 2) unless subnormal
    scaled = math.ldexp(a, mantissa_bits - exponent)  # exact: a power-of-two scaling
    steps = int(math.floor(scaled))
    rest = scaled - steps
    if rest > 0.5 or (rest == 0.5 and steps % 2 == 1):
        steps += 1
    if steps >= 2 << mantissa_bits:  # rounded up to the next power of two
        steps >>= 1
        exponent += 1
    field = exponent + bias if steps >= 1 << mantissa_bits else 0
    if field >= max_field:
        field, steps = max_field, 1 << mantissa_bits  # infinity
    return (sign << 15) | (field << mantissa_bits) | (steps - (1 << mantissa_bits) if field else steps)


@cuda.jit(device=True)
def half_bits(x):
    return float_bits(x, 10, -14, 15, 31)


@cuda.jit(device=True)
def _write_half(cache, block, offset, head, at, x):
    bits = half_bits(x)
    cache[block, offset, head, at] = bits & 0xFF
    cache[block, offset, head, at + 1] = (bits >> 8) & 0xFF


@cuda.jit(device=True)
def e4m3_code(v):
    """float32 -> E4M3 byte, rounded half away from zero, saturating at 448 (reference_kv.e4m3_codes)."""
    a = min(float(abs(v)), 448.0)
    if a < 2.0 ** -6:
        code = int(math.floor(a * 512.0 + 0.5))
    else:
        mantissa, exponent = math.frexp(a)
        code = min((exponent + 6) * 8 + int(math.floor(mantissa * 16.0 + 0.5)) - 8, 0x7E)
    return code | (0x80 if v < 0 or (v == 0 and math.copysign(1.0, v) < 0) else 0)


@cuda.jit(device=True)
def round_away(v):
    return np.float32(math.copysign(math.floor(abs(v) + np.float32(0.5)), v))


@cuda.jit(device=True)
def _block_scale(block_values, kv_type):
    """The block's scale before fp16 rounding: amax / 127 (q8_0), amax / 448 (fp8)."""
    amax = np.float32(0.0)
    for j in range(VALUES_PER_BLOCK):
        amax = max(amax, abs(block_values[j]))
    if kv_type == Q8_0:
        return amax / np.float32(127.0)
    return amax / np.float32(448.0)


@cuda.jit(device=True)
def q4_0_code(x, iscale):
    return min(7, max(-8, int(round_away(x * iscale))))


@cuda.jit(device=True)
def _q4_0_scales(block_values):
    """(iscale, d) of a q4_0 block (its Hadamard transform): the least-squares best of make_qx_quants' candidates,
    as reference_kv._quantize_q4_0 (float64 sums: exact, so fused multiply-adds cannot change them)."""
    amax, peak = np.float32(0.0), block_values[0]  # the first value of largest magnitude, as llama.cpp
    for j in range(VALUES_PER_BLOCK):
        if abs(block_values[j]) > amax:
            amax, peak = abs(block_values[j]), block_values[j]
    safe_peak = peak if peak != 0 else np.float32(1.0)
    best_score, best_iscale, d = -1.0, np.float32(0.0), np.float32(0.0)
    for i in range(Q4_0_NUMERATORS.size):
        iscale = Q4_0_NUMERATORS[i] / safe_peak
        sumlx, suml2 = 0.0, 0
        for j in range(VALUES_PER_BLOCK):
            code = q4_0_code(block_values[j], iscale)
            sumlx += float(block_values[j]) * code
            suml2 += code * code
        score = sumlx * sumlx / suml2 if suml2 > 0 else 0.0
        if score > best_score:
            best_score, best_iscale = score, iscale
            d = np.float32(sumlx / suml2) if suml2 > 0 else np.float32(0.0)
    return best_iscale, d


@cuda.jit(device=True)
def store_block(values, token, head, unit, cache, kv_type, block, offset):
    """Values unit*32 .. unit*32+31 of values[token, head] into cache[block, offset, head], in its KV type."""
    first = unit * VALUES_PER_BLOCK
    stop = min(first + VALUES_PER_BLOCK, values.shape[2])  # f32, f16, bf16 rows need not be whole blocks
    if kv_type == F32:
        for d in range(first, stop):
            cache[block, offset, head, d] = values[token, head, d]
    elif kv_type == F16 or kv_type == BF16:
        for d in range(first, stop):
            x = values[token, head, d]
            bits = half_bits(x) if kv_type == F16 else float_bits(x, 7, -126, 127, 255)
            cache[block, offset, head, 2 * d] = bits & 0xFF
            cache[block, offset, head, 2 * d + 1] = (bits >> 8) & 0xFF
    else:
        _store_scaled_block(values, token, head, first, cache, kv_type, block, offset)


@cuda.jit(device=True)
def q4_0_outlier_positions(values, token, head, positions):
    """positions[:count] = the row's q4_0 outliers (reference_kv.q4_0_outlier_positions: largest magnitude first,
    the lower position among equals); returns count. Every thread of the row finds them alike."""
    width = values.shape[2]
    count = q4_0_outlier_count(width)
    for k in range(count):
        best, best_size = -1, np.float32(0.0)
        for j in range(width):
            taken = False
            for t in range(k):
                taken = taken or positions[t] == j
            if not taken and (best < 0 or abs(values[token, head, j]) > best_size):
                best, best_size = j, abs(values[token, head, j])
        positions[k] = best
    return count


@cuda.jit(device=True)
def _store_q4_0_block(values, token, head, block_values, first, cache, block, offset):
    """q4_0: the row's outliers zeroed in the block (unit 0 writes them after the blocks), then the block's
    Hadamard transform with the best candidate scale (_q4_0_scales)."""
    positions = cuda.local.array(MAX_Q4_0_OUTLIERS, np.int64)
    width = values.shape[2]
    for k in range(q4_0_outlier_positions(values, token, head, positions)):
        at = positions[k]
        if first <= at < first + VALUES_PER_BLOCK:
            block_values[at - first] = np.float32(0.0)
        if first == 0:
            base = 18 * (width // VALUES_PER_BLOCK) + Q4_0_OUTLIER_BYTES * k
            _write_half(cache, block, offset, head, base, values[token, head, at])
            cache[block, offset, head, base + 2] = at
    hadamard_block(block_values)
    iscale, d = _q4_0_scales(block_values)
    base = (first // VALUES_PER_BLOCK) * 18
    _write_half(cache, block, offset, head, base, d)
    for j in range(VALUES_PER_BLOCK // 2):
        low, high = q4_0_code(block_values[j], iscale) + 8, q4_0_code(block_values[16 + j], iscale) + 8
        cache[block, offset, head, base + 2 + j] = low | (high << 4)


@cuda.jit(device=True)
def _store_scaled_block(values, token, head, first, cache, kv_type, block, offset):
    block_values = cuda.local.array(VALUES_PER_BLOCK, np.float32)
    for j in range(VALUES_PER_BLOCK):
        block_values[j] = values[token, head, first + j]
    if kv_type == Q4_0:
        _store_q4_0_block(values, token, head, block_values, first, cache, block, offset)
        return
    d = _block_scale(block_values, kv_type)
    if kv_type == FP8:
        d = half_to_float(half_bits(d))  # fp8 divides by the scale it stores
    inverse = np.float32(1.0) / d if d != 0 else np.float32(0.0)
    base = (first // VALUES_PER_BLOCK) * 34
    _write_half(cache, block, offset, head, base, d)
    for j in range(VALUES_PER_BLOCK):
        v = block_values[j] * inverse
        cache[block, offset, head, base + 2 + j] = (int(round_away(v)) & 0xFF) if kv_type == Q8_0 else e4m3_code(v)
