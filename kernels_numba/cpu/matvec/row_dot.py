"""Dot products of row groups with x for every supported type, dispatched on the quant_type code."""
from numba import njit

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.block_dot import (dot4_q5, dot4_q8_0, dot4_q8_0_x2, dot4_q5_0_x2, dot_f32, dot_k_quant, dot_q2_k, dot_q3_k, dot_q4_0,
                                         dot_q4_1, dot_q6_k)
from kernels_numba.cpu.matvec.iq_dot import dot_iq2_xxs, dot_iq3_xxs, dot_iq4_nl, dot_iq4_xs
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.matvec.row_decode import decode_row


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_row(code, row, x, x_sums):
    """Dot of one row with x for the types without a four-row kernel (all but Q8_0, Q5_0, Q5_1 and the floats)."""
    if code == qt.Q4_K:
        return dot_k_quant(row, x, x_sums, 144, -1, 16)
    if code == qt.Q6_K:
        return dot_q6_k(row, x)
    if code == qt.Q4_0:
        return dot_q4_0(row, x)
    if code == qt.Q4_1:
        return dot_q4_1(row, x, x_sums)
    if code == qt.Q2_K:
        return dot_q2_k(row, x, x_sums)
    if code == qt.Q3_K:
        return dot_q3_k(row, x)
    if code == qt.IQ4_NL:
        return dot_iq4_nl(row, x)
    if code == qt.IQ4_XS:
        return dot_iq4_xs(row, x)
    if code == qt.IQ2_XXS:
        return dot_iq2_xxs(row, x)
    if code == qt.IQ3_XXS:
        return dot_iq3_xxs(row, x)
    return dot_k_quant(row, x, x_sums, 176, 16, 48)  # Q5_K


ROWS_PER_GROUP = 4


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_group_into(code, data, first_row, x, x_sums, scratch, out):
    """out[t, r] = dot(row r decoded as `code`, x[t]) for the rows first_row .. first_row+3 that exist.

    scratch: float32 [k] for the float types (decoded once per row).
    """
    stop_row = min(first_row + ROWS_PER_GROUP, data.shape[0])
    if code == qt.Q8_0 or code == qt.Q5_0 or code == qt.Q5_1:
        last = stop_row - 1  # a short final group repeats its last row; the repeats are not written
        rows = (first_row, min(first_row + 1, last), min(first_row + 2, last), min(first_row + 3, last))
        first_single = 0
        if code == qt.Q8_0 or code == qt.Q5_0:  # token pairs share each decoded weight
            first_single = x.shape[0] - x.shape[0] % 2
            for t in range(0, first_single, 2):
                if code == qt.Q8_0:
                    pair = dot4_q8_0_x2(data, rows, x[t], x[t + 1])
                else:
                    pair = dot4_q5_0_x2(data, rows, x[t], x[t + 1])
                for g in range(stop_row - first_row):
                    out[t, first_row + g] = pair[0][g]
                    out[t + 1, first_row + g] = pair[1][g]
        for t in range(first_single, x.shape[0]):
            if code == qt.Q8_0:
                values = dot4_q8_0(data, rows, x[t])
            elif code == qt.Q5_0:
                values = dot4_q5(data, rows, x[t], x_sums[t], False)
            else:
                values = dot4_q5(data, rows, x[t], x_sums[t], True)
            for g in range(stop_row - first_row):
                out[t, first_row + g] = values[g]
    elif code == qt.F32 or code == qt.F16 or code == qt.BF16:
        for r in range(first_row, stop_row):
            decode_row(code, data[r], scratch)
            for t in range(x.shape[0]):
                out[t, r] = dot_f32(scratch, x[t])
    else:
        for r in range(first_row, stop_row):
            for t in range(x.shape[0]):
                out[t, r] = dot_row(code, data[r], x[t], x_sums[t])
