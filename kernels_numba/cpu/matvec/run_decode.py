"""Rows in the run layout (run_layout.py) decoded to float32 in value order, bit for bit as block_decode decodes
the GGUF rows they came from (the same float32 operations): the tile decode of long prefill chunks, which BLAS
multiplies faster than the 8-bit dots do at hundreds of tokens."""
import numpy as np
from numba import njit

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.block_decode import k_scale_and_min
from kernels_numba.cpu.ir.half import read_half
from kernels_numba.cpu.matvec.run_layout import FOLDED_MAX_RUNS, FOLDED_SLICES, SLICE_VALUES, group_runs


@njit(cache=True, inline="always")
def _nibble(row, pairs_at, width, j, i):
    """The 4-bit value of byte i of slice j (slice pairs of 4 * width bytes from pairs_at)."""
    byte = np.int32(row[pairs_at + 4 * width * (j // 2) + i])
    return (byte >> 4) if j % 2 else (byte & 15)


@njit(cache=True)
def _decode_block_runs(row, out, run_bytes, zero_point, has_fifth_bit, has_min):
    """Q5_0 / Q4_0 / Q4_1 groups: G f16 scales | (Q4_1) G f16 mins | 4 slice pairs | (Q5_0) 8 x G/2 bytes of
    fifth bits. Byte i of slice pair m holds values 8m + i % 4 (low nibble) and 8m + 4 + i % 4 (high) of run
    i // 4."""
    num_runs = out.size // 32
    scales, mins = np.empty(16, dtype=np.float32), np.zeros(16, dtype=np.float32)
    first_run, base = 0, 0
    while first_run < num_runs:
        width = group_runs(num_runs - first_run)
        header_bytes = 4 * width if has_min else 2 * width
        for lane in range(width):
            scales[lane] = read_half(row, base + 2 * lane)
            if has_min:
                mins[lane] = read_half(row, base + 2 * width + 2 * lane)
        for m in range(4):
            pairs_at = base + header_bytes + 4 * width * m
            low_bits_at = base + 18 * width + 2 * m * (width // 2)
            high_bits_at = low_bits_at + width // 2
            for i in range(4 * width):
                byte = np.int32(row[pairs_at + i])
                low, high = byte & 15, byte >> 4
                if has_fifth_bit:
                    shift = i % 8
                    low |= ((np.int32(row[low_bits_at + i // 8]) >> shift) & 1) << 4
                    high |= ((np.int32(row[high_bits_at + i // 8]) >> shift) & 1) << 4
                d = scales[i // 4]
                at = 32 * (first_run + i // 4) + 8 * m + i % 4
                if has_min:  # block_decode's Q4_1: d * q + m
                    out[at] = d * np.float32(low) + mins[i // 4]
                    out[at + 4] = d * np.float32(high) + mins[i // 4]
                else:
                    out[at] = d * np.float32(low - zero_point)
                    out[at + 4] = d * np.float32(high - zero_point)
        first_run += width
        base += run_bytes * width


@njit(cache=True)
def _decode_q4_k_runs(row, out):
    """Q4_K groups: G/8 GGUF super-block headers | 4 slice pairs."""
    num_runs = out.size // 32
    first_run, base = 0, 0
    while first_run < num_runs:
        width = group_runs(num_runs - first_run)
        for lane in range(width):
            header = base + 16 * (lane // 8)
            d, dmin = read_half(row, header), read_half(row, header + 2)
            scale, minimum = k_scale_and_min(row, header + 4, lane % 8)
            d_scale, m_offset = d * np.float32(scale), dmin * np.float32(minimum)
            first = 32 * (first_run + lane)
            for j in range(8):
                for b in range(SLICE_VALUES):
                    q = _nibble(row, base + 2 * width, width, j, SLICE_VALUES * lane + b)
                    out[first + SLICE_VALUES * j + b] = d_scale * np.float32(q) - m_offset
        first_run += width
        base += 18 * width


@njit(cache=True)
def _decode_q6_k_runs(row, out):
    """Q6_K groups (one super-block, 16 runs of 16): 16 int8 scales | d f16 | 2 slice pairs | 64 bytes of high
    bit pairs."""
    for group in range(out.size // 256):
        base = 210 * group
        d = read_half(row, base + 16)
        for lane in range(16):
            scale = d * np.float32(np.int8(row[base + lane]))
            first = 256 * group + 16 * lane
            for j in range(4):
                for b in range(SLICE_VALUES):
                    i = SLICE_VALUES * lane + b
                    q = _nibble(row, base + 18, 16, j, i) | (((np.int32(row[base + 146 + i]) >> (2 * j)) & 3) << 4)
                    out[first + SLICE_VALUES * j + b] = scale * np.float32(q - 32)


@njit(cache=True)
def _decode_q8_0_runs(row, out):
    """Q8_0 groups: G f16 scales | 8 slices of 4G bytes of quant + 128 (a 4- or 2-run group's slices in the order
    FOLDED_SLICES)."""
    num_runs = out.size // 32
    scales = np.empty(16, dtype=np.float32)
    first_run, base = 0, 0
    while first_run < num_runs:
        width = group_runs(num_runs - first_run)
        for lane in range(width):
            scales[lane] = read_half(row, base + 2 * lane)
        for position in range(8):
            j = FOLDED_SLICES[position] if width <= FOLDED_MAX_RUNS else position
            slice_at = base + 2 * width + 4 * width * position
            for lane in range(width):
                for b in range(SLICE_VALUES):
                    q = np.int32(row[slice_at + SLICE_VALUES * lane + b]) - 128
                    out[32 * (first_run + lane) + SLICE_VALUES * j + b] = scales[lane] * np.float32(q)
        first_run += width
        base += 34 * width


@njit(cache=True)
def decode_run_row(code, row, out):
    """One row of a run code (quant_type.R_*) into float32 `out`."""
    if code == qt.R_Q5_0:
        _decode_block_runs(row, out, 22, 16, True, False)
    elif code == qt.R_Q4_0:
        _decode_block_runs(row, out, 18, 8, False, False)
    elif code == qt.R_Q4_1:
        _decode_block_runs(row, out, 20, 0, False, True)
    elif code == qt.R_Q4_K:
        _decode_q4_k_runs(row, out)
    elif code == qt.R_Q6_K:
        _decode_q6_k_runs(row, out)
    else:
        _decode_q8_0_runs(row, out)
