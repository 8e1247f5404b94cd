"""Decoding a quantized row 32 values at a time, two values per step: j and j + 16 of one 32-value block.

The batched mat-vec (batch_dot) decodes one block of a few rows into float32 on the stack and then reuses it for
every token. Every type below stores a 32-value run (Q8_0/Q5/Q4 blocks, a K-quant sub-block, a Q6_K quarter)
whose values j and j + 16 come from byte j and byte j + 16, or from the two nibbles of byte j, so
`pair_values` is one loop body for all of them. `block_params` reads what a block shares (scales, minimum,
where its bytes start) once per block and row. Both take the type code as a literal (`literally`): numba
compiles one small specialisation per type with the other branches pruned, and LLVM inlines it into the
caller's loop. (numba's own inline="always" copied the IR of every branch into every call site: 95 s of
compile time for one type.) Quant arithmetic stays in int32 (numba widens integer ops to int64, which halves
the SIMD width: see block_dot).
"""
import numpy as np
from numba import literally, njit

from kernels_numba.cpu.matvec.quant_type import Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0
from kernels_numba.cpu.matvec.block_decode import k_scale_and_min, read_u32
from kernels_numba.cpu.matvec.block_dot import q5_quants
from kernels_numba.cpu.ir.half import read_half

I32, F32 = np.int32, np.float32
# the types pair_values decodes; the others keep the one-token-at-a-time kernels
PAIR_CODES = (Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)


@njit(cache=True)
def _k_quant_params(data, row, blk, block_bytes, high_bits_at, quants_at):
    """Q4_K / Q5_K sub-block blk % 8: d*scale, dmin*min, its nibble bytes and nibble shift, high-bit bytes."""
    base, sub = block_bytes * (blk // 8), blk % 8
    scale, minimum = k_scale_and_min(data[row], base + 4, sub)
    return (read_half(data[row], base) * F32(scale), read_half(data[row], base + 2) * F32(minimum),
            base + quants_at + 32 * (sub // 2), I32(4 * (sub % 2)), base + high_bits_at, I32(sub))


@njit(cache=True)
def _q6_k_params(data, row, blk):
    """Q6_K quarter q of half h: the scales of its two 16-value halves, low-nibble bytes and shift, high bits."""
    base, half, quarter = 210 * (blk // 8), (blk % 8) // 4, blk % 4
    d = read_half(data[row], base + 208)
    scales = base + 192 + 8 * half + 2 * quarter
    return (d * F32(np.int8(data[row, scales])), d * F32(np.int8(data[row, scales + 1])),
            base + 64 * half + 32 * (quarter % 2), I32(4 * (quarter // 2)), base + 128 + 32 * half, I32(2 * quarter))


@njit(cache=True)
def block_params(code, data, row, blk):
    """What 32-value block `blk` of row `row` shares: (scale, second scale or minimum, first quant byte,
    nibble shift or high-bit word, second byte offset, second shift)."""
    literally(code)
    zero = F32(0.0)
    if code == Q8_0:
        base = 34 * blk
        return read_half(data[row], base), zero, base + 2, I32(0), 0, I32(0)
    if code == Q5_0:
        base = 22 * blk
        return read_half(data[row], base), zero, base + 6, I32(read_u32(data[row], base + 2)), 0, I32(0)
    if code == Q5_1:
        base = 24 * blk
        return (read_half(data[row], base), read_half(data[row], base + 2), base + 8,
                I32(read_u32(data[row], base + 4)), 0, I32(0))
    if code == Q4_0:
        base = 18 * blk
        return read_half(data[row], base), zero, base + 2, I32(0), 0, I32(0)
    if code == Q4_1:
        base = 20 * blk
        return read_half(data[row], base), read_half(data[row], base + 2), base + 4, I32(0), 0, I32(0)
    if code == Q4_K:
        return _k_quant_params(data, row, blk, 144, 0, 16)
    if code == Q5_K:
        return _k_quant_params(data, row, blk, 176, 16, 48)
    return _q6_k_params(data, row, blk)


@njit(cache=True)
def _byte(data, row, at):
    """data[row, at] as int32, indexed unsigned: a signed index gets a negative-index select per value, and with
    it LLVM no longer sees consecutive bytes (it gathered them one by one: 4x slower)."""
    return I32(data[row, np.uint64(at)])


@njit(cache=True)
def _nibble(data, row, at, shift):
    return I32(I32(_byte(data, row, at) >> shift) & I32(15))


@njit(cache=True)
def _high_bit(data, row, at, shift):
    """Bit `shift` of byte `at` as the fifth bit (16) of a Q5_K quant."""
    return I32(I32(I32(_byte(data, row, at) >> shift) & I32(1)) << I32(4))


@njit(cache=True)
def _q6_value(data, row, at, shift, high_at, high_shift):
    high = I32(I32(I32(_byte(data, row, high_at) >> high_shift) & I32(3)) << I32(4))
    return F32(I32(I32(_nibble(data, row, at, shift) | high) - I32(32)))


@njit(cache=True)
def pair_values(code, data, row, params, j):
    """Values j and j + 16 (j < 16) of the block `params` describes, as float32."""
    literally(code)
    scale, second, at, bits, at2, shift2 = params
    if code == Q8_0:
        return scale * F32(np.int8(_byte(data, row, at + j))), scale * F32(np.int8(_byte(data, row, at + 16 + j)))
    if code == Q5_0 or code == Q5_1:
        q_low, q_high = q5_quants(_byte(data, row, at + j), bits, j, -16 if code == Q5_0 else 0)
        return scale * q_low + second, scale * q_high + second
    if code == Q4_0 or code == Q4_1:
        byte, offset = _byte(data, row, at + j), I32(-8) if code == Q4_0 else I32(0)
        q_low, q_high = I32(I32(byte & I32(15)) + offset), I32(I32(byte >> I32(4)) + offset)
        return scale * F32(q_low) + second, scale * F32(q_high) + second
    if code == Q4_K or code == Q5_K:
        q_low, q_high = _nibble(data, row, at + j, bits), _nibble(data, row, at + 16 + j, bits)
        if code == Q5_K:
            q_low = I32(q_low | _high_bit(data, row, at2 + j, shift2))
            q_high = I32(q_high | _high_bit(data, row, at2 + 16 + j, shift2))
        return scale * F32(q_low) - second, scale * F32(q_high) - second
    return (scale * _q6_value(data, row, at + j, bits, at2 + j, shift2),
            second * _q6_value(data, row, at + 16 + j, bits, at2 + 16 + j, shift2))
