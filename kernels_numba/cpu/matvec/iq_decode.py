"""Exact decoding of i-quant rows into float32 (numba, no fastmath: bit-exact with ggml), like block_decode.

IQ4_NL / IQ4_XS map 4-bit indices to 16 non-uniform levels. IQ2_XXS / IQ3_XXS store each run of 32 values as
grid indices (8 or 4 magnitudes per entry), one 7-bit sign index per 8 values and a 4-bit scale in a uint32.
"""
import numpy as np
from numba import njit

from kernels_numba.cpu.matvec.block_decode import read_u32, run_length
from kernels_numba.cpu.ir.half import read_half
from kernels_numba.iq_tables import IQ2_XXS_GRID, IQ3_XXS_GRID, IQ4_NL_LEVELS, SIGN_VALUES


@njit(cache=True)
def decode_iq4_nl(row, out):  # block: d f16 | 16 bytes of level indices (low nibbles: values 0-15, high: 16-31)
    half_block = run_length(row, out, 18, 2)
    for blk in range(out.size // 32):
        base, first = 18 * blk, 32 * blk
        d = read_half(row, base)
        for j in range(half_block):
            byte = np.int32(row[base + 2 + j])
            out[first + j] = d * IQ4_NL_LEVELS[byte & 15]
            out[first + 16 + j] = d * IQ4_NL_LEVELS[byte >> 4]


@njit(cache=True)
def iq4_xs_scale(row, base, sub):
    """Signed six-bit scale of sub-block 0..7 of the IQ4_XS super-block at `base`.

    Low 4 bits: nibble sub % 2 of byte 4 + sub // 2; high 2 bits: bits 2*sub of the uint16 at byte 2; plus 32.
    """
    low = (np.int32(row[base + 4 + sub // 2]) >> (4 * (sub % 2))) & 15
    high = (np.int32(row[base + 2 + sub // 4]) >> (2 * (sub % 4))) & 3
    return (low | (high << 4)) - 32


@njit(cache=True)
def decode_iq4_xs(row, out):  # super-block: d | u16 high scale bits | 4 low scale bytes | 8 x 16 index bytes
    half_sub_block = run_length(row, out, 136, 16)
    for sb in range(out.size // 256):
        base, first = 136 * sb, 256 * sb
        d = read_half(row, base)
        for sub in range(8):
            d_scale = d * np.float32(iq4_xs_scale(row, base, sub))
            quants, start = base + 8 + 16 * sub, first + 32 * sub
            for j in range(half_sub_block):
                byte = np.int32(row[quants + j])
                out[start + j] = d_scale * IQ4_NL_LEVELS[byte & 15]
                out[start + 16 + j] = d_scale * IQ4_NL_LEVELS[byte >> 4]


@njit(cache=True)
def group_scale(d, word, step):
    """ggml's d * (0.5 + top 4 bits of the group's uint32) * step, in float32 and in that order."""
    return d * (np.float32(0.5) + np.float32(word >> 28)) * np.float32(step)


@njit(cache=True)
def decode_iq2_xxs(row, out):  # super-block: d | 8 x (4 grid index bytes | u32: four 7-bit sign indices, scale)
    entry_length = run_length(row, out, 66, 32)  # 8 values per grid entry
    for sb in range(out.size // 256):
        base, first = 66 * sb, 256 * sb
        d = read_half(row, base)
        for group in range(8):
            at, start = base + 2 + 8 * group, first + 32 * group
            word = read_u32(row, at + 4)
            scale = group_scale(d, word, 0.25)
            for part in range(4):  # 8 values: one grid entry, one sign index
                entry, signs = np.int32(row[at + part]), (word >> (7 * part)) & 127
                for j in range(entry_length):
                    out[start + 8 * part + j] = scale * IQ2_XXS_GRID[entry, j] * SIGN_VALUES[signs, j]


@njit(cache=True)
def decode_iq3_xxs(row, out):  # super-block: d | 64 grid index bytes | 8 x u32: four 7-bit sign indices, scale
    entry_length = run_length(row, out, 98, 64)  # 4 values per grid entry
    for sb in range(out.size // 256):
        base, first = 98 * sb, 256 * sb
        d = read_half(row, base)
        for group in range(8):
            entries, start = base + 2 + 8 * group, first + 32 * group
            word = read_u32(row, base + 66 + 4 * group)
            scale = group_scale(d, word, 0.5)
            for part in range(4):  # 8 values: two 4-value grid entries, one sign index
                low, high = np.int32(row[entries + 2 * part]), np.int32(row[entries + 2 * part + 1])
                signs, at = (word >> (7 * part)) & 127, start + 8 * part
                for j in range(entry_length):
                    out[at + j] = scale * IQ3_XXS_GRID[low, j] * SIGN_VALUES[signs, j]
                    out[at + 4 + j] = scale * IQ3_XXS_GRID[high, j] * SIGN_VALUES[signs, 4 + j]
