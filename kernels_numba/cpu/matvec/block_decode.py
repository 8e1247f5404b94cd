"""Exact decoding of one row of ggml blocks into float32, per type (numba, no fastmath: bit-exact with ggml).

Each `decode_<type>(row, out)` takes the raw uint8 bytes of one row and writes its len(out) values. The float32
operations happen in ggml's order, so results match gguf-py's dequantize bit for bit. The i-quants live in
iq_decode; row_decode dispatches on the type code.
"""
import numpy as np
from numba import njit

from kernels_numba.cpu.ir.half import bits_to_float32, read_half


@njit(cache=True)
def decode_f32(row, out):
    for j in range(out.size):
        b = 4 * j
        out[j] = bits_to_float32(np.uint32(row[b]) | (np.uint32(row[b + 1]) << 8) | (np.uint32(row[b + 2]) << 16)
                                 | (np.uint32(row[b + 3]) << 24))


@njit(cache=True)
def decode_f16(row, out):
    for j in range(out.size):
        out[j] = read_half(row, 2 * j)


@njit(cache=True)
def decode_bf16(row, out):
    for j in range(out.size):  # bf16 is the top half of a float32
        out[j] = bits_to_float32((np.uint32(row[2 * j]) << 16) | (np.uint32(row[2 * j + 1]) << 24))


@njit(cache=True)
def run_length(row, out, block_bytes, runs_per_block):
    """Values per inner run (e.g. 32 for Q8_0), computed from the shapes at run time on purpose.

    With a constant trip count LLVM unrolls the inner loop and then cannot vectorise it (the float stores might
    alias the row bytes); with a run-time count its loop vectoriser adds an alias check and emits SIMD code.
    """
    return out.size // (row.size // block_bytes) // runs_per_block


@njit(cache=True)
def decode_q4_0(row, out):  # block: d f16 | 16 bytes of nibbles (low: values 0-15, high: 16-31)
    half_block = run_length(row, out, 18, 2)
    for blk in range(out.size // 32):
        base, first = 18 * blk, 32 * blk
        d = read_half(row, base)
        for j in range(half_block):
            byte = np.int32(row[base + 2 + j])
            out[first + j] = d * np.float32((byte & 15) - 8)
            out[first + 16 + j] = d * np.float32((byte >> 4) - 8)


@njit(cache=True)
def decode_q4_1(row, out):  # block: d f16 | m f16 | 16 bytes of nibbles
    half_block = run_length(row, out, 20, 2)
    for blk in range(out.size // 32):
        base, first = 20 * blk, 32 * blk
        d, m = read_half(row, base), read_half(row, base + 2)
        for j in range(half_block):
            byte = np.int32(row[base + 4 + j])
            out[first + j] = d * np.float32(byte & 15) + m
            out[first + 16 + j] = d * np.float32(byte >> 4) + m


@njit(cache=True)
def read_u32(row, offset):
    return (np.int64(row[offset]) | (np.int64(row[offset + 1]) << 8) | (np.int64(row[offset + 2]) << 16)
            | (np.int64(row[offset + 3]) << 24))


@njit(cache=True)
def decode_q5_0(row, out):  # block: d f16 | high bits u32 (bit j -> value j) | 16 bytes of nibbles
    half_block = run_length(row, out, 22, 2)
    for blk in range(out.size // 32):
        base, first = 22 * blk, 32 * blk
        d = read_half(row, base)
        high_bits = read_u32(row, base + 2)
        for j in range(half_block):
            byte = np.int32(row[base + 6 + j])
            q_low = (byte & 15) | np.int32(((high_bits >> j) & 1) << 4)
            q_high = (byte >> 4) | np.int32(((high_bits >> (j + 16)) & 1) << 4)
            out[first + j] = d * np.float32(q_low - 16)
            out[first + 16 + j] = d * np.float32(q_high - 16)


@njit(cache=True)
def decode_q5_1(row, out):  # block: d f16 | m f16 | high bits u32 | 16 bytes of nibbles
    half_block = run_length(row, out, 24, 2)
    for blk in range(out.size // 32):
        base, first = 24 * blk, 32 * blk
        d, m = read_half(row, base), read_half(row, base + 2)
        high_bits = read_u32(row, base + 4)
        for j in range(half_block):
            byte = np.int32(row[base + 8 + j])
            q_low = (byte & 15) | np.int32(((high_bits >> j) & 1) << 4)
            q_high = (byte >> 4) | np.int32(((high_bits >> (j + 16)) & 1) << 4)
            out[first + j] = d * np.float32(q_low) + m
            out[first + 16 + j] = d * np.float32(q_high) + m


@njit(cache=True)
def decode_q8_0(row, out):  # block: d f16 | 32 int8
    block = run_length(row, out, 34, 1)
    for blk in range(out.size // 32):
        base, first = 34 * blk, 32 * blk
        d = read_half(row, base)
        for j in range(block):
            out[first + j] = np.float32(np.int8(row[base + 2 + j])) * d


@njit(cache=True)
def k_scale_and_min(row, offset, sub_block):
    """Six-bit scale and min of sub-block 0..7 from the 12 packed bytes at `offset` (Q4_K / Q5_K)."""
    if sub_block < 4:
        scale = np.int32(row[offset + sub_block]) & 63
        minimum = np.int32(row[offset + sub_block + 4]) & 63
    else:
        extra = np.int32(row[offset + sub_block + 4])
        scale = (extra & 15) | ((np.int32(row[offset + sub_block - 4]) >> 6) << 4)
        minimum = (extra >> 4) | ((np.int32(row[offset + sub_block]) >> 6) << 4)
    return scale, minimum


@njit(cache=True)
def decode_k_quant(row, out, block_bytes, high_bits_at, quants_at):
    """Q4_K (high_bits_at < 0) or Q5_K rows; super-block: d | dmin | 12 scale bytes | [32 high-bit bytes] |
    128 bytes in 4 chunks of 32 (low nibbles: sub-block 2c, high nibbles: 2c+1)."""
    sub_block = run_length(row, out, block_bytes, 8)
    for sb in range(out.size // 256):
        base, first = block_bytes * sb, 256 * sb
        d, dmin = read_half(row, base), read_half(row, base + 2)
        for sub in range(8):
            scale, minimum = k_scale_and_min(row, base + 4, sub)
            d_scale, m_offset = d * np.float32(scale), dmin * np.float32(minimum)
            chunk, shift = base + quants_at + 32 * (sub // 2), 4 * (sub % 2)
            for l in range(sub_block):
                q = (np.int32(row[chunk + l]) >> shift) & 15
                if high_bits_at >= 0:
                    q |= ((np.int32(row[base + high_bits_at + l]) >> sub) & 1) << 4
                out[first + 32 * sub + l] = d_scale * np.float32(q) - m_offset


@njit(cache=True)
def decode_q6_k(row, out):  # super-block: 128 low-nibble bytes | 64 high-2-bit bytes | 16 int8 scales | d f16
    quarter = run_length(row, out, 210, 16)  # 16 values share a scale
    for sb in range(out.size // 256):
        base, first = 210 * sb, 256 * sb
        d = read_half(row, base + 208)
        for half in range(2):  # 128 values: 64 low bytes (two nibbles each) + 32 high bytes (four 2-bit pairs)
            low, high, scales, start = base + 64 * half, base + 128 + 32 * half, base + 192 + 8 * half, first + 128 * half
            for part in range(2):  # 16 values of each quarter share one scale
                d0 = d * np.float32(np.int8(row[scales + part]))
                d1 = d * np.float32(np.int8(row[scales + 2 + part]))
                d2 = d * np.float32(np.int8(row[scales + 4 + part]))
                d3 = d * np.float32(np.int8(row[scales + 6 + part]))
                for j in range(quarter):
                    l = 16 * part + j
                    low_a, low_b = np.int32(row[low + l]), np.int32(row[low + 32 + l])
                    bits = np.int32(row[high + l])
                    out[start + l] = d0 * np.float32(((low_a & 15) | ((bits & 3) << 4)) - 32)
                    out[start + 32 + l] = d1 * np.float32(((low_b & 15) | (((bits >> 2) & 3) << 4)) - 32)
                    out[start + 64 + l] = d2 * np.float32(((low_a >> 4) | (((bits >> 4) & 3) << 4)) - 32)
                    out[start + 96 + l] = d3 * np.float32(((low_b >> 4) | ((bits >> 6) << 4)) - 32)


@njit(cache=True)
def decode_q2_k(row, out):  # super-block: 16 bytes (scale | min << 4 per 16 values) | 64 quant bytes | d | dmin
    run = run_length(row, out, 84, 16)  # 16 values share a scale and a min
    for sb in range(out.size // 256):
        base, first = 84 * sb, 256 * sb
        d, dmin = read_half(row, base + 80), read_half(row, base + 82)
        for sub in range(16):  # value 128h + 32s + l is bits 2s, 2s+1 of quant byte 32h + l
            packed = np.int32(row[base + sub])
            d_scale, m_offset = d * np.float32(packed & 15), dmin * np.float32(packed >> 4)
            quants, shift = base + 16 + 32 * (sub // 8) + 16 * (sub % 2), 2 * ((sub // 2) % 4)
            for j in range(run):
                q = (np.int32(row[quants + j]) >> shift) & 3
                out[first + 16 * sub + j] = d_scale * np.float32(q) - m_offset


@njit(cache=True)
def q3_k_scale(row, offset, sub):
    """Signed six-bit scale of 16-value sub-block 0..15 from the 12 packed bytes at `offset` (Q3_K).

    Low 4 bits: byte sub % 8 (low nibble for sub < 8, high after); high 2 bits: bits 2*(sub // 4) of byte
    8 + sub % 4; stored plus 32.
    """
    low = (np.int32(row[offset + sub % 8]) >> (4 * (sub // 8))) & 15
    high = (np.int32(row[offset + 8 + sub % 4]) >> (2 * (sub // 4))) & 3
    return (low | (high << 4)) - 32


@njit(cache=True)
def decode_q3_k(row, out):  # super-block: 32 high-bit bytes | 64 low-2-bit bytes | 12 scale bytes | d f16
    run = run_length(row, out, 110, 16)  # 16 values share a scale
    for sb in range(out.size // 256):
        base, first = 110 * sb, 256 * sb
        d = read_half(row, base + 108)
        for sub in range(16):  # value i: low bits as in Q2_K, high bit i // 32 of byte i % 32 (clear: minus 4)
            d_scale = d * np.float32(q3_k_scale(row, base + 96, sub))
            lane = 16 * (sub % 2)
            quants, shift, plane = base + 32 + 32 * (sub // 8) + lane, 2 * ((sub // 2) % 4), sub // 2
            for j in range(run):
                low = (np.int32(row[quants + j]) >> shift) & 3
                high = (np.int32(row[base + lane + j]) >> plane) & 1
                out[first + 16 * sub + j] = d_scale * np.float32((low | (high << 2)) - 4)
