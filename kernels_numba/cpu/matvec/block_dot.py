"""Fused dequantize-and-dot of quantized rows with a float32 vector (the decode-time matvec inner loop).

Each weight byte is read once and becomes float32 in registers. The loops have the lane-accumulator shape
`lanes[j] += scale * q[j] * x[j]` over one block (a small fixed lane array on the stack, see lanes.py, reduced
once per row): the lane array keeps LLVM from vectorising across blocks with gathers, the fully unrolled block
becomes SIMD loads, converts and FMAs, and the lanes stay in registers across blocks. For types with a per-block
minimum, `min * sum(x)` uses `x_sums` (sums of each run of 32 values of x, 16 for Q2_K), one scalar per
sub-block. Q8_0 and Q5_0/Q5_1 (most of the default model's bytes) advance four rows together so their accumulator
chains overlap and share the loads of x. row_dot dispatches to these kernels and to the i-quant ones (iq_dot).

Two codegen rules, both measured: quant arithmetic is kept in int32 (`I32(...)`; numba widens integer ops to
int64, which halves the SIMD width), and kernels taking layout parameters are inlined (`inline="always"`) into
callers that pass constants, so LLVM sees constant offsets and emits contiguous vector loads.
"""
import numpy as np
from numba import njit

from kernels_numba.cpu.matvec.block_decode import k_scale_and_min, q3_k_scale, read_u32
from kernels_numba.cpu.ir.half import read_half
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.ir.lanes import lane_sum, zeroed_lanes

I32 = np.int32


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_f32(a, b):
    total = np.float32(0.0)
    for j in range(a.size):
        total += a[j] * b[j]
    return total


@njit(cache=True, inline="always")
def four_row_sums(lanes, first):
    """The totals of four rows whose 32 lanes each lie one after another from `first` (four-row kernels)."""
    return (lane_sum(lanes, first, 32), lane_sum(lanes, first + 32, 32), lane_sum(lanes, first + 64, 32),
            lane_sum(lanes, first + 96, 32))


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot4_q8_0(data, rows, x):
    """Dots of four Q8_0 rows (indices `rows`, may repeat) with x; block: d f16 | 32 int8."""
    ra, rb, rc, rd = rows
    lanes = zeroed_lanes(128)
    for blk in range(x.size // 32):
        base, first = 34 * blk, 32 * blk
        da, db = read_half(data[ra], base), read_half(data[rb], base)
        dc, dd = read_half(data[rc], base), read_half(data[rd], base)
        for j in range(32):
            xj = x[first + j]
            lanes[j] += da * np.float32(np.int8(data[ra, base + 2 + j])) * xj
            lanes[32 + j] += db * np.float32(np.int8(data[rb, base + 2 + j])) * xj
            lanes[64 + j] += dc * np.float32(np.int8(data[rc, base + 2 + j])) * xj
            lanes[96 + j] += dd * np.float32(np.int8(data[rd, base + 2 + j])) * xj
    return four_row_sums(lanes, 0)


@njit(cache=True)
def q5_quants(byte, high_bits, j, offset):
    """The two 5-bit quants (values j and j+16, plus `offset`) stored in nibble byte j of a Q5 block."""
    # a bit test, not `(high_bits >> j) & 1`: numba widens that shift to int64 (measured 1.5x slower)
    high_low = I32(16) if I32(high_bits & I32(1 << j)) != I32(0) else I32(0)
    high_high = I32(16) if I32(high_bits & I32(1 << (j + 16))) != I32(0) else I32(0)
    q_low = I32(I32(byte & I32(15)) | high_low)
    q_high = I32(I32(byte >> I32(4)) | high_high)
    return np.float32(I32(q_low + I32(offset))), np.float32(I32(q_high + I32(offset)))


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def dot4_q5(data, rows, x, x_sums, has_min):
    """Dots of four Q5_0 rows (has_min False: d*(q-16)) or Q5_1 rows (d*q + m) with x."""
    ra, rb, rc, rd = rows
    high_bits_at = 4 if has_min else 2
    block_bytes, quants_at, offset = high_bits_at + 20, high_bits_at + 4, 0 if has_min else -16
    lanes = zeroed_lanes(128)
    min_a = min_b = min_c = min_d = np.float32(0.0)
    for blk in range(x.size // 32):
        base, first = block_bytes * blk, 32 * blk
        da, db = read_half(data[ra], base), read_half(data[rb], base)
        dc, dd = read_half(data[rc], base), read_half(data[rd], base)
        ha, hb = I32(read_u32(data[ra], base + high_bits_at)), I32(read_u32(data[rb], base + high_bits_at))
        hc, hd = I32(read_u32(data[rc], base + high_bits_at)), I32(read_u32(data[rd], base + high_bits_at))
        for j in range(16):
            x_low, x_high = x[first + j], x[first + 16 + j]
            qa_low, qa_high = q5_quants(np.int32(data[ra, base + quants_at + j]), ha, j, offset)
            qb_low, qb_high = q5_quants(np.int32(data[rb, base + quants_at + j]), hb, j, offset)
            qc_low, qc_high = q5_quants(np.int32(data[rc, base + quants_at + j]), hc, j, offset)
            qd_low, qd_high = q5_quants(np.int32(data[rd, base + quants_at + j]), hd, j, offset)
            lanes[j] += da * qa_low * x_low
            lanes[16 + j] += da * qa_high * x_high
            lanes[32 + j] += db * qb_low * x_low
            lanes[48 + j] += db * qb_high * x_high
            lanes[64 + j] += dc * qc_low * x_low
            lanes[80 + j] += dc * qc_high * x_high
            lanes[96 + j] += dd * qd_low * x_low
            lanes[112 + j] += dd * qd_high * x_high
        if has_min:
            min_a += read_half(data[ra], base + 2) * x_sums[blk]
            min_b += read_half(data[rb], base + 2) * x_sums[blk]
            min_c += read_half(data[rc], base + 2) * x_sums[blk]
            min_d += read_half(data[rd], base + 2) * x_sums[blk]
    return (lane_sum(lanes, 0, 32) + min_a, lane_sum(lanes, 32, 32) + min_b,
            lane_sum(lanes, 64, 32) + min_c, lane_sum(lanes, 96, 32) + min_d)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q4_0(row, x):  # block: d f16 | 16 bytes: low nibbles values 0-15, high nibbles 16-31
    lanes = zeroed_lanes(32)
    for blk in range(x.size // 32):
        base, first = 18 * blk, 32 * blk
        d = read_half(row, base)
        for j in range(16):
            byte = I32(row[base + 2 + j])
            lanes[j] += d * np.float32(I32(I32(byte & I32(15)) - I32(8))) * x[first + j]
            lanes[16 + j] += d * np.float32(I32(I32(byte >> I32(4)) - I32(8))) * x[first + 16 + j]
    return lane_sum(lanes, 0, 32)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q4_1(row, x, x_sums):  # block: d f16 | m f16 | 16 bytes of nibbles
    lanes = zeroed_lanes(32)
    min_total = np.float32(0.0)
    for blk in range(x.size // 32):
        base, first = 20 * blk, 32 * blk
        d = read_half(row, base)
        for j in range(16):
            byte = I32(row[base + 4 + j])
            lanes[j] += d * np.float32(I32(byte & I32(15))) * x[first + j]
            lanes[16 + j] += d * np.float32(I32(byte >> I32(4))) * x[first + 16 + j]
        min_total += read_half(row, base + 2) * x_sums[blk]
    return lane_sum(lanes, 0, 32) + min_total


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def dot_k_quant(row, x, x_sums, block_bytes, high_bits_at, quants_at):
    """Q4_K (high_bits_at < 0) or Q5_K row: d*scale*q*x per value, minus dmin*min*sum(x) per 32 values.

    Super-block: d | dmin | 12 packed scale bytes | [Q5_K: 32 high-bit bytes] | 128 nibble bytes.
    """
    lanes = zeroed_lanes(64)
    min_total = np.float32(0.0)
    for sb in range(x.size // 256):
        base = block_bytes * sb
        d, dmin = read_half(row, base), read_half(row, base + 2)
        for pair in range(4):  # sub-blocks 2*pair (low nibbles) and 2*pair+1 (high nibbles) share 32 bytes
            scale_low, min_low = k_scale_and_min(row, base + 4, 2 * pair)
            scale_high, min_high = k_scale_and_min(row, base + 4, 2 * pair + 1)
            d_low, d_high = d * np.float32(scale_low), d * np.float32(scale_high)
            quants, first = base + quants_at + 32 * pair, 256 * sb + 64 * pair
            for l in range(32):
                byte = I32(row[quants + l])
                q_low, q_high = I32(byte & I32(15)), I32(byte >> I32(4))
                if high_bits_at >= 0:
                    bits = I32(I32(row[base + high_bits_at + l]) >> I32(2 * pair))
                    q_low = I32(q_low | I32(I32(bits & I32(1)) << I32(4)))
                    q_high = I32(q_high | I32(I32(bits & I32(2)) << I32(3)))
                lanes[l] += d_low * np.float32(q_low) * x[first + l]
                lanes[32 + l] += d_high * np.float32(q_high) * x[first + 32 + l]
            sub = 8 * sb + 2 * pair
            min_total += dmin * (np.float32(min_low) * x_sums[sub] + np.float32(min_high) * x_sums[sub + 1])
    return lane_sum(lanes, 0, 64) - min_total


@njit(cache=True)
def q6_value(low4, high_bits, shift):
    """Signed Q6_K quant: 4 low bits | 2 high bits taken at `shift` of the high byte, minus 32, as float32."""
    return np.float32(I32(I32(low4 | I32(I32(I32(high_bits >> I32(shift)) & I32(3)) << I32(4))) - I32(32)))


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q6_k(row, x):
    """Q6_K row; super-block: 128 low-nibble bytes | 64 high-2-bit bytes | 16 int8 scales | d f16."""
    lanes = zeroed_lanes(64)
    for sb in range(x.size // 256):
        base = 210 * sb
        d = read_half(row, base + 208)
        for half in range(2):
            low, high, scales = base + 64 * half, base + 128 + 32 * half, base + 192 + 8 * half
            for part in range(2):  # values 16*part .. 16*part+15 of each quarter share one scale
                d0 = d * np.float32(np.int8(row[scales + part]))
                d1 = d * np.float32(np.int8(row[scales + 2 + part]))
                d2 = d * np.float32(np.int8(row[scales + 4 + part]))
                d3 = d * np.float32(np.int8(row[scales + 6 + part]))
                first = 256 * sb + 128 * half + 16 * part
                for j in range(16):
                    l = 16 * part + j
                    low_a, low_b = I32(row[low + l]), I32(row[low + 32 + l])
                    bits = I32(row[high + l])
                    lanes[j] += d0 * q6_value(I32(low_a & I32(15)), bits, 0) * x[first + j]
                    lanes[16 + j] += d1 * q6_value(I32(low_b & I32(15)), bits, 2) * x[first + 32 + j]
                    lanes[32 + j] += d2 * q6_value(I32(low_a >> I32(4)), bits, 4) * x[first + 64 + j]
                    lanes[48 + j] += d3 * q6_value(I32(low_b >> I32(4)), bits, 6) * x[first + 96 + j]
    return lane_sum(lanes, 0, 64)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q2_k(row, x, x_sums):
    """Q2_K row: d*scale*q*x per value, minus dmin*min*sum(x) per 16 values (x_sums: one sum per 16 values).

    Super-block: 16 bytes (scale | min << 4) | 64 quant bytes (value 128h + 32s + l: bits 2s of byte 32h + l) |
    d | dmin.
    """
    lanes = zeroed_lanes(64)
    min_total = np.float32(0.0)
    for sb in range(x.size // 256):
        base = 84 * sb
        d, dmin = read_half(row, base + 80), read_half(row, base + 82)
        for half in range(2):
            quants, scales = base + 16 + 32 * half, base + 8 * half
            for part in range(2):  # values 16*part .. 16*part+15 of each run of 32 share one scale
                d0 = d * np.float32(I32(I32(row[scales + part]) & I32(15)))
                d1 = d * np.float32(I32(I32(row[scales + 2 + part]) & I32(15)))
                d2 = d * np.float32(I32(I32(row[scales + 4 + part]) & I32(15)))
                d3 = d * np.float32(I32(I32(row[scales + 6 + part]) & I32(15)))
                first = 256 * sb + 128 * half + 16 * part
                for j in range(16):
                    byte = I32(row[quants + 16 * part + j])
                    lanes[j] += d0 * np.float32(I32(byte & I32(3))) * x[first + j]
                    lanes[16 + j] += d1 * np.float32(I32(I32(byte >> I32(2)) & I32(3))) * x[first + 32 + j]
                    lanes[32 + j] += d2 * np.float32(I32(I32(byte >> I32(4)) & I32(3))) * x[first + 64 + j]
                    lanes[48 + j] += d3 * np.float32(I32(byte >> I32(6))) * x[first + 96 + j]
        mins = np.float32(0.0)
        for sub in range(16):
            mins += np.float32(I32(I32(row[base + sub]) >> I32(4))) * x_sums[16 * sb + sub]
        min_total += dmin * mins
    return lane_sum(lanes, 0, 64) - min_total


@njit(cache=True)
def q3_value(low_bits, high_bits, run):
    """Signed Q3_K quant of run 0..3: bits 2*run of low_bits, bit `run` of high_bits as 4, minus 4, as float32."""
    low = I32(I32(low_bits >> I32(2 * run)) & I32(3))
    high = I32(I32(I32(high_bits >> I32(run)) & I32(1)) << I32(2))
    return np.float32(I32(I32(low | high) - I32(4)))


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q3_k(row, x):
    """Q3_K row; super-block: 32 high-bit bytes | 64 low-2-bit bytes (laid out as Q2_K) | 12 scale bytes | d f16."""
    lanes = zeroed_lanes(64)
    for sb in range(x.size // 256):
        base = 110 * sb
        d = read_half(row, base + 108)
        for half in range(2):
            quants = base + 32 + 32 * half
            for part in range(2):
                sub = 8 * half + part  # sub-block of run s is sub + 2s
                d0 = d * np.float32(q3_k_scale(row, base + 96, sub))
                d1 = d * np.float32(q3_k_scale(row, base + 96, sub + 2))
                d2 = d * np.float32(q3_k_scale(row, base + 96, sub + 4))
                d3 = d * np.float32(q3_k_scale(row, base + 96, sub + 6))
                first = 256 * sb + 128 * half + 16 * part
                for j in range(16):
                    l = 16 * part + j
                    byte = I32(row[quants + l])
                    high = I32(I32(row[base + l]) >> I32(4 * half))  # bit s: high bit of run s
                    lanes[j] += d0 * q3_value(byte, high, 0) * x[first + j]
                    lanes[16 + j] += d1 * q3_value(byte, high, 1) * x[first + 32 + j]
                    lanes[32 + j] += d2 * q3_value(byte, high, 2) * x[first + 64 + j]
                    lanes[48 + j] += d3 * q3_value(byte, high, 3) * x[first + 96 + j]
    return lane_sum(lanes, 0, 64)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot4_q8_0_x2(data, rows, x0, x1):
    """dot4_q8_0 for two tokens at once: each weight is decoded once and used for both (batched decode)."""
    ra, rb, rc, rd = rows
    lanes = zeroed_lanes(256)
    for blk in range(x0.size // 32):
        base, first = 34 * blk, 32 * blk
        da, db = read_half(data[ra], base), read_half(data[rb], base)
        dc, dd = read_half(data[rc], base), read_half(data[rd], base)
        for j in range(32):
            x0j, x1j = x0[first + j], x1[first + j]
            wa = da * np.float32(np.int8(data[ra, base + 2 + j]))
            wb = db * np.float32(np.int8(data[rb, base + 2 + j]))
            wc = dc * np.float32(np.int8(data[rc, base + 2 + j]))
            wd = dd * np.float32(np.int8(data[rd, base + 2 + j]))
            lanes[j] += wa * x0j
            lanes[32 + j] += wb * x0j
            lanes[64 + j] += wc * x0j
            lanes[96 + j] += wd * x0j
            lanes[128 + j] += wa * x1j
            lanes[160 + j] += wb * x1j
            lanes[192 + j] += wc * x1j
            lanes[224 + j] += wd * x1j
    return four_row_sums(lanes, 0), four_row_sums(lanes, 128)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot4_q5_0_x2(data, rows, x0, x1):
    """dot4_q5 for Q5_0 and two tokens at once: each weight is decoded once and used for both."""
    ra, rb, rc, rd = rows
    lanes = zeroed_lanes(256)
    for blk in range(x0.size // 32):
        base, first = 22 * blk, 32 * blk
        da, db = read_half(data[ra], base), read_half(data[rb], base)
        dc, dd = read_half(data[rc], base), read_half(data[rd], base)
        ha, hb = I32(read_u32(data[ra], base + 2)), I32(read_u32(data[rb], base + 2))
        hc, hd = I32(read_u32(data[rc], base + 2)), I32(read_u32(data[rd], base + 2))
        for j in range(16):
            qa_low, qa_high = q5_quants(np.int32(data[ra, base + 6 + j]), ha, j, -16)
            qb_low, qb_high = q5_quants(np.int32(data[rb, base + 6 + j]), hb, j, -16)
            qc_low, qc_high = q5_quants(np.int32(data[rc, base + 6 + j]), hc, j, -16)
            qd_low, qd_high = q5_quants(np.int32(data[rd, base + 6 + j]), hd, j, -16)
            wa_low, wa_high, wb_low, wb_high = da * qa_low, da * qa_high, db * qb_low, db * qb_high
            wc_low, wc_high, wd_low, wd_high = dc * qc_low, dc * qc_high, dd * qd_low, dd * qd_high
            for t in range(2):
                x = x0 if t == 0 else x1
                x_low, x_high, at = x[first + j], x[first + 16 + j], 128 * t
                lanes[at + j] += wa_low * x_low
                lanes[at + 16 + j] += wa_high * x_high
                lanes[at + 32 + j] += wb_low * x_low
                lanes[at + 48 + j] += wb_high * x_high
                lanes[at + 64 + j] += wc_low * x_low
                lanes[at + 80 + j] += wc_high * x_high
                lanes[at + 96 + j] += wd_low * x_low
                lanes[at + 112 + j] += wd_high * x_high
    return four_row_sums(lanes, 0), four_row_sums(lanes, 128)
