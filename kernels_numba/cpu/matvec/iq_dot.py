"""Fused dequantize-and-dot of i-quant rows with a float32 vector, in block_dot's lane-accumulator shape.

Tables hold float32: IQ4 levels are a 16-entry gather. The IQ2_XXS / IQ3_XXS grid entries and sign patterns are
rows of 8 (or 4) contiguous floats, so their inner loop runs over the values of one entry and sums the entries
of a 32-value group per lane. numba runs LLVM's loop vectoriser but not its SLP vectoriser, and a loop with a
constant trip count of 8 is fully unrolled before the vectoriser sees it, so these kernels take the entry
length from run_length (a run-time count): measured 3x faster than the unrolled scalar code.
"""
import numpy as np
from numba import njit

from kernels_numba.cpu.matvec.block_decode import read_u32, run_length
from kernels_numba.cpu.matvec.block_dot import I32
from kernels_numba.cpu.ir.half import read_half
from kernels_numba.cpu.matvec.iq_decode import group_scale, iq4_xs_scale
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.ir.lanes import lane_sum, zeroed_lanes
from kernels_numba.iq_tables import IQ2_XXS_GRID, IQ3_XXS_GRID, IQ4_NL_LEVELS, SIGN_VALUES


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_iq4_nl(row, x):  # block: d f16 | 16 bytes of level indices (low nibbles: values 0-15, high: 16-31)
    lanes = zeroed_lanes(32)
    for blk in range(x.size // 32):
        base, first = 18 * blk, 32 * blk
        d = read_half(row, base)
        for j in range(16):
            byte = I32(row[base + 2 + j])
            lanes[j] += d * IQ4_NL_LEVELS[I32(byte & I32(15))] * x[first + j]
            lanes[16 + j] += d * IQ4_NL_LEVELS[I32(byte >> I32(4))] * x[first + 16 + j]
    return lane_sum(lanes, 0, 32)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_iq4_xs(row, x):  # super-block: d | u16 high scale bits | 4 low scale bytes | 8 x 16 index bytes
    lanes = zeroed_lanes(32)
    for sb in range(x.size // 256):
        base = 136 * sb
        d = read_half(row, base)
        for sub in range(8):
            d_scale = d * np.float32(iq4_xs_scale(row, base, sub))
            quants, first = base + 8 + 16 * sub, 256 * sb + 32 * sub
            for j in range(16):
                byte = I32(row[quants + j])
                lanes[j] += d_scale * IQ4_NL_LEVELS[I32(byte & I32(15))] * x[first + j]
                lanes[16 + j] += d_scale * IQ4_NL_LEVELS[I32(byte >> I32(4))] * x[first + 16 + j]
    return lane_sum(lanes, 0, 32)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_iq2_xxs(row, x):
    """IQ2_XXS row; super-block: d | 8 x (4 grid index bytes | u32: four 7-bit sign indices, scale in bits 28-31)."""
    entry_length = run_length(row, x, 66, 32)  # 8 values per grid entry, known only at run time on purpose
    lanes = zeroed_lanes(8)
    for sb in range(x.size // 256):
        base = 66 * sb
        d = read_half(row, base)
        for group in range(8):  # 32 values: grid entries e0..e3, sign indices s0..s3
            at, first = base + 2 + 8 * group, 256 * sb + 32 * group
            word = read_u32(row, at + 4)
            scale = group_scale(d, word, 0.25)
            e0, e1, e2, e3 = np.intp(row[at]), np.intp(row[at + 1]), np.intp(row[at + 2]), np.intp(row[at + 3])
            s0, s1 = np.intp(word & 127), np.intp((word >> 7) & 127)
            s2, s3 = np.intp((word >> 14) & 127), np.intp((word >> 21) & 127)
            for j in range(entry_length):
                lanes[j] += scale * (IQ2_XXS_GRID[e0, j] * SIGN_VALUES[s0, j] * x[first + j]
                                     + IQ2_XXS_GRID[e1, j] * SIGN_VALUES[s1, j] * x[first + 8 + j]
                                     + IQ2_XXS_GRID[e2, j] * SIGN_VALUES[s2, j] * x[first + 16 + j]
                                     + IQ2_XXS_GRID[e3, j] * SIGN_VALUES[s3, j] * x[first + 24 + j])
    return lane_sum(lanes, 0, 8)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_iq3_xxs(row, x):
    """IQ3_XXS row; super-block: d | 64 grid index bytes | 8 x u32: four 7-bit sign indices, scale in bits 28-31."""
    entry_length = run_length(row, x, 98, 64)  # 4 values per grid entry, known only at run time on purpose
    lanes = zeroed_lanes(4)
    for sb in range(x.size // 256):
        base = 98 * sb
        d = read_half(row, base)
        for group in range(8):  # 32 values: grid entries e0..e7, sign indices s0..s3 (one per two entries)
            at, first = base + 2 + 8 * group, 256 * sb + 32 * group
            word = read_u32(row, base + 66 + 4 * group)
            scale = group_scale(d, word, 0.5)
            e0, e1, e2, e3 = np.intp(row[at]), np.intp(row[at + 1]), np.intp(row[at + 2]), np.intp(row[at + 3])
            e4, e5, e6, e7 = np.intp(row[at + 4]), np.intp(row[at + 5]), np.intp(row[at + 6]), np.intp(row[at + 7])
            s0, s1 = np.intp(word & 127), np.intp((word >> 7) & 127)
            s2, s3 = np.intp((word >> 14) & 127), np.intp((word >> 21) & 127)
            for j in range(entry_length):
                lanes[j] += scale * (IQ3_XXS_GRID[e0, j] * SIGN_VALUES[s0, j] * x[first + j]
                                     + IQ3_XXS_GRID[e1, j] * SIGN_VALUES[s0, 4 + j] * x[first + 4 + j]
                                     + IQ3_XXS_GRID[e2, j] * SIGN_VALUES[s1, j] * x[first + 8 + j]
                                     + IQ3_XXS_GRID[e3, j] * SIGN_VALUES[s1, 4 + j] * x[first + 12 + j]
                                     + IQ3_XXS_GRID[e4, j] * SIGN_VALUES[s2, j] * x[first + 16 + j]
                                     + IQ3_XXS_GRID[e5, j] * SIGN_VALUES[s2, 4 + j] * x[first + 20 + j]
                                     + IQ3_XXS_GRID[e6, j] * SIGN_VALUES[s3, j] * x[first + 24 + j]
                                     + IQ3_XXS_GRID[e7, j] * SIGN_VALUES[s3, 4 + j] * x[first + 28 + j])
    return lane_sum(lanes, 0, 4)
