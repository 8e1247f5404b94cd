"""Fused FP8 E4M3 mat-vec for a few tokens: four rows per pass, each weight byte decoded once in registers.

The shape of block_dot's Q8_0 kernels: 32 stack lanes per row and token (lanes.py), four rows per pass so their
FMA chains overlap and share the loads of x, token pairs sharing each decoded weight. Weights are decoded 16 at a
time by fp8_decode. The scale of a 32-column chunk multiplies x (one multiply per x value, shared by the four
rows), so a group's rows must share their scale row: block_rows % 4 == 0. Layouts with a single column block
(per-channel, per-tensor) scale each row's total once instead. `fast_layout` says which weights qualify; the rest
(tiny test models with odd block sizes) take the tile path in fp8.py.
"""
import numpy as np
from numba import njit

from kernels_numba.cpu.matvec.block_dot import four_row_sums
from kernels_numba.cpu.matvec.fp8_decode import E4M3_DECODE_FACTOR, decode_e4m3x16
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.ir.lanes import zeroed_lanes
from kernels_numba.cpu.ir.prefetch import prefetch_rows

CHUNK = 32  # columns per lane pass; every scale block holds whole chunks
ROWS_PER_GROUP = 4
PREFETCH_ROWS_AHEAD = 4


def fast_layout(num_cols: int, scales: np.ndarray, block_rows: int, block_cols: int) -> bool:
    """Whether the fused kernels take this weight: whole 32-column chunks, one scale row per group of 4 rows."""
    if num_cols % CHUNK:
        return False
    return scales.shape[1] == 1 or (block_cols % CHUNK == 0 and block_rows % ROWS_PER_GROUP == 0)


@njit(cache=True, inline="always")
def _row_total_scale(scales, block_rows, row, one_column_block):
    return scales[row // block_rows, 0] if one_column_block else np.float32(1.0)


@njit(cache=True, inline="always")
def _group_rows(first_row, num_rows):
    """The four rows of a group; a short final group repeats its last row (the repeats are not written)."""
    last = min(first_row + ROWS_PER_GROUP, num_rows) - 1
    return first_row, min(first_row + 1, last), min(first_row + 2, last), min(first_row + 3, last)


# Inlined at numba IR level into fp8_groups_into, so its cached machine code holds the loops: numba runs a
# cached caller's callees as their standalone code, and that ran these kernels 2x slower than inlined (measured).
@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def dot4_e4m3_into(data, first_row, x, t, out, scales, block_rows, scale_row, chunks_per_scale):
    """out[t, r] = dot(row r, x[t]) for rows first_row..first_row+3; chunk k of 32 columns has the scale
    scale_row[k // chunks_per_scale] (single-column-block layouts: 1, each row's total scaled at the end)."""
    ra, rb, rc, rd = _group_rows(first_row, data.shape[0])
    x0 = x[t]
    lanes = zeroed_lanes(128)
    w = zeroed_lanes(64)
    scale, block, next_block_at = scale_row[0] * np.float32(E4M3_DECODE_FACTOR), 0, chunks_per_scale
    for k in range(x0.size // CHUNK):
        if k == next_block_at:  # a counter, not k // chunks_per_scale: that division made token pairs 1.8x slower
            block, next_block_at = block + 1, next_block_at + chunks_per_scale
            scale = scale_row[block] * np.float32(E4M3_DECODE_FACTOR)
        for half in range(2):
            at = CHUNK * k + 16 * half
            decode_e4m3x16(w[0:16], data, ra, at)
            decode_e4m3x16(w[16:32], data, rb, at)
            decode_e4m3x16(w[32:48], data, rc, at)
            decode_e4m3x16(w[48:64], data, rd, at)
            for j in range(16):
                xj = scale * x0[at + j]
                lanes[16 * half + j] += w[j] * xj
                lanes[32 + 16 * half + j] += w[16 + j] * xj
                lanes[64 + 16 * half + j] += w[32 + j] * xj
                lanes[96 + 16 * half + j] += w[48 + j] * xj
    totals = four_row_sums(lanes, 0)
    one_column_block = scales.shape[1] == 1
    for g in range(min(ROWS_PER_GROUP, data.shape[0] - first_row)):
        out[t, first_row + g] = totals[g] * _row_total_scale(scales, block_rows, first_row + g, one_column_block)


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def dot4_e4m3_x2_into(data, first_row, x, t, out, scales, block_rows, scale_row, chunks_per_scale):
    """dot4_e4m3_into for tokens t and t+1: each decoded weight serves both."""
    ra, rb, rc, rd = _group_rows(first_row, data.shape[0])
    x0, x1 = x[t], x[t + 1]
    lanes = zeroed_lanes(256)
    w = zeroed_lanes(64)
    scale, block, next_block_at = scale_row[0] * np.float32(E4M3_DECODE_FACTOR), 0, chunks_per_scale
    for k in range(x0.size // CHUNK):
        if k == next_block_at:
            block, next_block_at = block + 1, next_block_at + chunks_per_scale
            scale = scale_row[block] * np.float32(E4M3_DECODE_FACTOR)
        for half in range(2):
            at = CHUNK * k + 16 * half
            decode_e4m3x16(w[0:16], data, ra, at)
            decode_e4m3x16(w[16:32], data, rb, at)
            decode_e4m3x16(w[32:48], data, rc, at)
            decode_e4m3x16(w[48:64], data, rd, at)
            for j in range(16):
                x0j, x1j, lane = scale * x0[at + j], scale * x1[at + j], 16 * half + j
                lanes[lane] += w[j] * x0j
                lanes[32 + lane] += w[16 + j] * x0j
                lanes[64 + lane] += w[32 + j] * x0j
                lanes[96 + lane] += w[48 + j] * x0j
                lanes[128 + lane] += w[j] * x1j
                lanes[160 + lane] += w[16 + j] * x1j
                lanes[192 + lane] += w[32 + j] * x1j
                lanes[224 + lane] += w[48 + j] * x1j
    first, second = four_row_sums(lanes, 0), four_row_sums(lanes, 128)
    one_column_block = scales.shape[1] == 1
    for g in range(min(ROWS_PER_GROUP, data.shape[0] - first_row)):
        row_scale = _row_total_scale(scales, block_rows, first_row + g, one_column_block)
        out[t, first_row + g] = first[g] * row_scale
        out[t + 1, first_row + g] = second[g] * row_scale


@njit(cache=True, nogil=True, fastmath=SUM_FASTMATH)
def fp8_groups_into(data, scales, block_rows, block_cols, first_group, stop_group, x, out):
    """out[t, r] = dot(row r, x[t]) for the rows of groups first_group..stop_group-1 (fast_layout weights)."""
    unit_row = np.ones(1, dtype=np.float32)  # the in-loop scale row of single-column-block layouts
    chunks_per_row = max(1, data.shape[1] // CHUNK)
    first_single = x.shape[0] - x.shape[0] % 2
    for group in range(first_group, stop_group):
        first_row = group * ROWS_PER_GROUP
        prefetch_rows(data, first_row + PREFETCH_ROWS_AHEAD, first_row + PREFETCH_ROWS_AHEAD + ROWS_PER_GROUP)
        if scales.shape[1] == 1:  # per-channel / per-tensor: scale each row's total instead
            scale_row, chunks_per_scale = unit_row, chunks_per_row
        else:
            scale_row, chunks_per_scale = scales[first_row // block_rows], block_cols // CHUNK
        for t in range(0, first_single, 2):
            dot4_e4m3_x2_into(data, first_row, x, t, out, scales, block_rows, scale_row, chunks_per_scale)
        for t in range(first_single, x.shape[0]):
            dot4_e4m3_into(data, first_row, x, t, out, scales, block_rows, scale_row, chunks_per_scale)
