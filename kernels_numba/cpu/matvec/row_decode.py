"""decode_row: one row of any supported type to float32, dispatched on its quant_type code."""
from numba import njit

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.block_decode import (decode_bf16, decode_f16, decode_f32, decode_k_quant, decode_q2_k,
                                            decode_q3_k, decode_q4_0, decode_q4_1, decode_q5_0, decode_q5_1,
                                            decode_q6_k, decode_q8_0)
from kernels_numba.cpu.matvec.iq_decode import decode_iq2_xxs, decode_iq3_xxs, decode_iq4_nl, decode_iq4_xs
from kernels_numba.cpu.matvec.run_decode import decode_run_row


@njit(cache=True)
def decode_row(code, row, out):
    """Decode one row of type `code` (quant_type code) into float32 `out`."""
    if code == qt.Q8_0:
        decode_q8_0(row, out)
    elif code == qt.Q4_K:
        decode_k_quant(row, out, 144, -1, 16)
    elif code == qt.Q6_K:
        decode_q6_k(row, out)
    elif code == qt.Q5_0:
        decode_q5_0(row, out)
    elif code == qt.Q4_0:
        decode_q4_0(row, out)
    elif code == qt.Q4_1:
        decode_q4_1(row, out)
    elif code == qt.Q5_1:
        decode_q5_1(row, out)
    elif code == qt.Q5_K:
        decode_k_quant(row, out, 176, 16, 48)
    elif code == qt.Q2_K:
        decode_q2_k(row, out)
    elif code == qt.Q3_K:
        decode_q3_k(row, out)
    elif code == qt.IQ4_NL:
        decode_iq4_nl(row, out)
    elif code == qt.IQ4_XS:
        decode_iq4_xs(row, out)
    elif code == qt.IQ2_XXS:
        decode_iq2_xxs(row, out)
    elif code == qt.IQ3_XXS:
        decode_iq3_xxs(row, out)
    elif code == qt.F16:
        decode_f16(row, out)
    elif code == qt.BF16:
        decode_bf16(row, out)
    elif code == qt.F32:
        decode_f32(row, out)
    elif code >= qt.R_Q5_0:  # the CPU's run layout of Q5_0, Q4_0, Q4_K, Q6_K, Q8_0 (run_layout.py)
        decode_run_row(code, row, out)
