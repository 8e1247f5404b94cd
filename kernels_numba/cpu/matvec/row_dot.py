"""Dot products of row groups with x for every supported type, dispatched on the quant_type code.

Inlined where they are called (numba IR): a leaf compiled per type (matmul.fused_kernel) holds its code as a
constant, and numba drops the other types' branches before it compiles anything they call (plain global code
names: numba does not fold `qt.Q8_0` there)."""
from numba import njit

from kernels_numba.cpu.matvec.quant_type import (BF16, F16, F32, IQ2_XXS, IQ3_XXS, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_0, Q4_1,
                                                 Q4_K, Q5_0, Q5_1, Q6_K, Q8_0)
from kernels_numba.cpu.matvec.block_dot import (dot4_q5, dot4_q8_0, dot4_q8_0_x2, dot4_q5_0_x2, dot_f32, dot_k_quant, dot_q2_k, dot_q3_k, dot_q4_0,
                                         dot_q4_1, dot_q6_k)
from kernels_numba.cpu.matvec.iq_dot import dot_iq2_xxs, dot_iq3_xxs, dot_iq4_nl, dot_iq4_xs
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.matvec.row_decode import decode_float_row


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q4_k(row, x, x_sums):
    return dot_k_quant(row, x, x_sums, 144, -1, 16)


@njit(cache=True, fastmath=SUM_FASTMATH)
def dot_q5_k(row, x, x_sums):
    return dot_k_quant(row, x, x_sums, 176, 16, 48)


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def dot_row(code, row, x, x_sums):
    """Dot of one row with x for the types without a four-row kernel (all but Q8_0, Q5_0, Q5_1 and the floats);
    each branch one call, so inlining it is cheap."""
    if code == Q4_K:
        return dot_q4_k(row, x, x_sums)
    if code == Q6_K:
        return dot_q6_k(row, x)
    if code == Q4_0:
        return dot_q4_0(row, x)
    if code == Q4_1:
        return dot_q4_1(row, x, x_sums)
    if code == Q2_K:
        return dot_q2_k(row, x, x_sums)
    if code == Q3_K:
        return dot_q3_k(row, x)
    if code == IQ4_NL:
        return dot_iq4_nl(row, x)
    if code == IQ4_XS:
        return dot_iq4_xs(row, x)
    if code == IQ2_XXS:
        return dot_iq2_xxs(row, x)
    if code == IQ3_XXS:
        return dot_iq3_xxs(row, x)
    return dot_q5_k(row, x, x_sums)


ROWS_PER_GROUP = 4


@njit(cache=True, inline="always")
def _group_rows(data, first_row):
    """(first row, stop row, the 4 row indices a four-row kernel reads: a short final group repeats its last)."""
    stop_row = min(first_row + ROWS_PER_GROUP, data.shape[0])
    last = stop_row - 1
    return stop_row, (first_row, min(first_row + 1, last), min(first_row + 2, last), min(first_row + 3, last))


@njit(cache=True, fastmath=SUM_FASTMATH)
def _q8_0_group_into(data, first_row, x, out):
    """Q8_0's four-row dots, token pairs sharing each decoded weight."""
    stop_row, rows = _group_rows(data, first_row)
    first_single = x.shape[0] - x.shape[0] % 2
    for t in range(0, first_single, 2):
        pair = dot4_q8_0_x2(data, rows, x[t], x[t + 1])
        for g in range(stop_row - first_row):
            out[t, first_row + g] = pair[0][g]
            out[t + 1, first_row + g] = pair[1][g]
    for t in range(first_single, x.shape[0]):
        values = dot4_q8_0(data, rows, x[t])
        for g in range(stop_row - first_row):
            out[t, first_row + g] = values[g]


@njit(cache=True, fastmath=SUM_FASTMATH)
def _q5_0_group_into(data, first_row, x, x_sums, out):
    """Q5_0's four-row dots, token pairs sharing each decoded weight."""
    stop_row, rows = _group_rows(data, first_row)
    first_single = x.shape[0] - x.shape[0] % 2
    for t in range(0, first_single, 2):
        pair = dot4_q5_0_x2(data, rows, x[t], x[t + 1])
        for g in range(stop_row - first_row):
            out[t, first_row + g] = pair[0][g]
            out[t + 1, first_row + g] = pair[1][g]
    for t in range(first_single, x.shape[0]):
        values = dot4_q5(data, rows, x[t], x_sums[t], False)
        for g in range(stop_row - first_row):
            out[t, first_row + g] = values[g]


@njit(cache=True, fastmath=SUM_FASTMATH)
def _q5_1_group_into(data, first_row, x, x_sums, out):
    """Q5_1's four-row dots, one token at a time."""
    stop_row, rows = _group_rows(data, first_row)
    for t in range(x.shape[0]):
        values = dot4_q5(data, rows, x[t], x_sums[t], True)
        for g in range(stop_row - first_row):
            out[t, first_row + g] = values[g]


@njit(cache=True, fastmath=SUM_FASTMATH)
def _float_group_into(code, data, first_row, x, scratch, out):
    """F32/F16/BF16 rows: each decoded once into scratch, then a float dot per token."""
    for r in range(first_row, min(first_row + ROWS_PER_GROUP, data.shape[0])):
        decode_float_row(code, data[r], scratch)
        for t in range(x.shape[0]):
            out[t, r] = dot_f32(scratch, x[t])


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def dot_group_into(code, data, first_row, x, x_sums, scratch, out):
    """out[t, r] = dot(row r decoded as `code`, x[t]) for the rows first_row .. first_row+3 that exist.

    scratch: float32 [k] for the float types (decoded once per row). Branches are calls (or dot_row's loop), so
    a leaf with a constant code inlines little and keeps one branch.
    """
    if code == Q8_0:
        _q8_0_group_into(data, first_row, x, out)
    elif code == Q5_0:
        _q5_0_group_into(data, first_row, x, x_sums, out)
    elif code == Q5_1:
        _q5_1_group_into(data, first_row, x, x_sums, out)
    elif code == F32 or code == F16 or code == BF16:
        _float_group_into(code, data, first_row, x, scratch, out)
    else:
        for r in range(first_row, min(first_row + ROWS_PER_GROUP, data.shape[0])):
            for t in range(x.shape[0]):
                out[t, r] = dot_row(code, data[r], x[t], x_sums[t])
