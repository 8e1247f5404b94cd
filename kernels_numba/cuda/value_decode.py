"""One weight value on the device: value j of row r of a weight's raw ggml bytes (or FP8 codes), as float32.

Lanes of a warp decode consecutive values of a row, so they read neighbouring bytes of the same block (one
coalesced load per block field). The float32 arithmetic follows ggml's order, as kernels_numba/cpu/block_decode.
Type codes are those of kernels_numba/quant_codes; FP8 (E4M3 codes with a grid of block scales) is code FP8.
"""
import numpy as np
from numba import cuda

from gguf_loader.fp8_layout import E4M3_TABLE
from kernels_numba.quant_codes import (BF16, F16, F32, IQ2_XXS, IQ3_XXS, IQ4_NL, IQ4_XS, NUM_GGML_CODES, Q2_K,
                                       Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0)
from kernels_numba.cuda.half import float_from_bits, half_to_float, read_half, read_u32
from kernels_numba.iq_tables import IQ2_XXS_GRID, IQ3_XXS_GRID, IQ4_NL_LEVELS, SIGN_VALUES

FP8 = NUM_GGML_CODES  # after the ggml type codes


@cuda.jit(device=True)
def byte_at(data, r, offset):
    return np.int32(data[r, offset])


@cuda.jit(device=True)
def nibble(data, r, offset, i):
    """Value i (0..31) of a 32-value run of nibbles at `offset`: low nibbles are values 0-15, high 16-31."""
    return (byte_at(data, r, offset + i % 16) >> (4 * (i // 16))) & 15


@cuda.jit(device=True)
def decode_plain(data, r, j, code):
    if code == F32:
        return float_from_bits(read_u32(data, r, 4 * j))
    if code == F16:
        return half_to_float(byte_at(data, r, 2 * j) | (byte_at(data, r, 2 * j + 1) << 8))
    return float_from_bits((np.int64(byte_at(data, r, 2 * j)) << 16) | (np.int64(byte_at(data, r, 2 * j + 1)) << 24))


@cuda.jit(device=True)
def decode_legacy(data, r, j, code):
    """Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL: blocks of 32 values."""
    i = j % 32
    if code == Q8_0:
        base = 34 * (j // 32)
        q = byte_at(data, r, base + 2 + i)
        return np.float32(q - 256 if q > 127 else q) * read_half(data, r, base)
    if code == Q4_0:
        base = 18 * (j // 32)
        return read_half(data, r, base) * np.float32(nibble(data, r, base + 2, i) - 8)
    if code == IQ4_NL:
        base = 18 * (j // 32)
        return read_half(data, r, base) * IQ4_NL_LEVELS[nibble(data, r, base + 2, i)]
    if code == Q4_1:
        base = 20 * (j // 32)
        return read_half(data, r, base) * np.float32(nibble(data, r, base + 4, i)) + read_half(data, r, base + 2)
    if code == Q5_0:
        base = 22 * (j // 32)
        q = nibble(data, r, base + 6, i) | np.int32(((read_u32(data, r, base + 2) >> i) & 1) << 4)
        return read_half(data, r, base) * np.float32(q - 16)
    base = 24 * (j // 32)  # Q5_1
    q = nibble(data, r, base + 8, i) | np.int32(((read_u32(data, r, base + 4) >> i) & 1) << 4)
    return read_half(data, r, base) * np.float32(q) + read_half(data, r, base + 2)


@cuda.jit(device=True)
def k_scale_and_min(data, r, offset, sub):
    """Six-bit scale and min of sub-block 0..7 from the 12 packed bytes at `offset` (Q4_K / Q5_K)."""
    if sub < 4:
        return byte_at(data, r, offset + sub) & 63, byte_at(data, r, offset + sub + 4) & 63
    extra = byte_at(data, r, offset + sub + 4)
    scale = (extra & 15) | ((byte_at(data, r, offset + sub - 4) >> 6) << 4)
    minimum = (extra >> 4) | ((byte_at(data, r, offset + sub) >> 6) << 4)
    return scale, minimum


@cuda.jit(device=True)
def decode_k_quant(data, r, j, code):
    """Q4_K and Q5_K: super-blocks of 256 values in 8 sub-blocks with six-bit scales and mins."""
    sub, l = (j % 256) // 32, j % 32
    block_bytes = 144 if code == Q4_K else 176
    quants_at = 16 if code == Q4_K else 48
    base = block_bytes * (j // 256)
    scale, minimum = k_scale_and_min(data, r, base + 4, sub)
    d_scale = read_half(data, r, base) * np.float32(scale)
    m_offset = read_half(data, r, base + 2) * np.float32(minimum)
    q = (byte_at(data, r, base + quants_at + 32 * (sub // 2) + l) >> (4 * (sub % 2))) & 15
    if code == Q5_K:
        q |= ((byte_at(data, r, base + 16 + l) >> sub) & 1) << 4
    return d_scale * np.float32(q) - m_offset


@cuda.jit(device=True)
def decode_q6_k(data, r, j):
    base, i = 210 * (j // 256), j % 256
    half, quarter, l = i // 128, (i % 128) // 32, i % 32
    scale = byte_at(data, r, base + 192 + 8 * half + 2 * quarter + l // 16)
    d_scale = read_half(data, r, base + 208) * np.float32(scale - 256 if scale > 127 else scale)
    low = (byte_at(data, r, base + 64 * half + 32 * (quarter % 2) + l) >> (4 * (quarter // 2))) & 15
    high = (byte_at(data, r, base + 128 + 32 * half + l) >> (2 * quarter)) & 3
    return d_scale * np.float32((low | (high << 4)) - 32)


@cuda.jit(device=True)
def decode_q2_q3_k(data, r, j, code):
    """Q2_K and Q3_K: 16 runs of 16 values; value 128h + 32s + l is bits 2s, 2s+1 of quant byte 32h + l."""
    i = j % 256
    sub, l = i // 16, i % 16
    shift = 2 * ((sub // 2) % 4)
    if code == Q2_K:
        base = 84 * (j // 256)
        packed = byte_at(data, r, base + sub)
        d_scale = read_half(data, r, base + 80) * np.float32(packed & 15)
        m_offset = read_half(data, r, base + 82) * np.float32(packed >> 4)
        q = (byte_at(data, r, base + 16 + 32 * (sub // 8) + 16 * (sub % 2) + l) >> shift) & 3
        return d_scale * np.float32(q) - m_offset
    base = 110 * (j // 256)
    low_scale = (byte_at(data, r, base + 96 + sub % 8) >> (4 * (sub // 8))) & 15
    high_scale = (byte_at(data, r, base + 104 + sub % 4) >> (2 * (sub // 4))) & 3
    d_scale = read_half(data, r, base + 108) * np.float32((low_scale | (high_scale << 4)) - 32)
    lane = 16 * (sub % 2)
    low = (byte_at(data, r, base + 32 + 32 * (sub // 8) + lane + l) >> shift) & 3
    high = (byte_at(data, r, base + lane + l) >> (sub // 2)) & 1
    return d_scale * np.float32((low | (high << 2)) - 4)


@cuda.jit(device=True)
def decode_i_quant(data, r, j, code):
    """IQ4_XS, IQ2_XXS and IQ3_XXS: super-blocks of 256 values in 8 groups of 32."""
    i = j % 256
    group, k = i // 32, i % 32
    if code == IQ4_XS:
        base = 136 * (j // 256)
        low = (byte_at(data, r, base + 4 + group // 2) >> (4 * (group % 2))) & 15
        high = (byte_at(data, r, base + 2 + group // 4) >> (2 * (group % 4))) & 3
        d_scale = read_half(data, r, base) * np.float32((low | (high << 4)) - 32)
        return d_scale * IQ4_NL_LEVELS[nibble(data, r, base + 8 + 16 * group, k)]
    part, m = k // 8, k % 8
    if code == IQ2_XXS:
        base = 66 * (j // 256)
        at = base + 2 + 8 * group
        word = read_u32(data, r, at + 4)
        scale = read_half(data, r, base) * (np.float32(0.5) + np.float32(word >> 28)) * np.float32(0.25)
        magnitude = IQ2_XXS_GRID[byte_at(data, r, at + part), m]
    else:
        base = 98 * (j // 256)
        word = read_u32(data, r, base + 66 + 4 * group)
        scale = read_half(data, r, base) * (np.float32(0.5) + np.float32(word >> 28)) * np.float32(0.5)
        magnitude = IQ3_XXS_GRID[byte_at(data, r, base + 2 + 8 * group + 2 * part + m // 4), m % 4]
    return scale * magnitude * SIGN_VALUES[(word >> (7 * part)) & 127, m]


@cuda.jit(device=True)
def decode_value(data, r, j, code, scales, block_rows, block_cols):
    """Value j of row r of a weight of type `code`; FP8 scales sit on a grid of block_rows x block_cols."""
    if code == FP8:
        return E4M3_TABLE[data[r, j]] * scales[r // block_rows, j // block_cols]
    if code <= BF16:
        return decode_plain(data, r, j, code)
    if code == Q4_K or code == Q5_K:
        return decode_k_quant(data, r, j, code)
    if code == Q6_K:
        return decode_q6_k(data, r, j)
    if code == Q2_K or code == Q3_K:
        return decode_q2_q3_k(data, r, j, code)
    if code == IQ4_XS or code == IQ2_XXS or code == IQ3_XXS:
        return decode_i_quant(data, r, j, code)
    return decode_legacy(data, r, j, code)
