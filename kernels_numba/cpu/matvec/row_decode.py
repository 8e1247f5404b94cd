"""decode_row: one row of any supported type to float32, dispatched on its quant_type code (inlined where it is
called, so a leaf compiled per type keeps only its own decoder: see row_dot.py)."""
from numba import njit

from kernels_numba.cpu.matvec.quant_type import (BF16, F16, F32, IQ2_XXS, IQ3_XXS, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_0, Q4_1,
                                                 Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, R_Q5_0)
from kernels_numba.cpu.matvec.block_decode import (decode_bf16, decode_f16, decode_f32, decode_k_quant, decode_q2_k,
                                            decode_q3_k, decode_q4_0, decode_q4_1, decode_q5_0, decode_q5_1,
                                            decode_q6_k, decode_q8_0)
from kernels_numba.cpu.matvec.iq_decode import decode_iq2_xxs, decode_iq3_xxs, decode_iq4_nl, decode_iq4_xs
from kernels_numba.cpu.matvec.run_decode import decode_run_row


@njit(cache=True, inline="always")
def decode_row(code, row, out):
    """Decode one row of type `code` (quant_type code) into float32 `out`."""
    if code == Q8_0:
        decode_q8_0(row, out)
    elif code == Q4_K:
        decode_k_quant(row, out, 144, -1, 16)
    elif code == Q6_K:
        decode_q6_k(row, out)
    elif code == Q5_0:
        decode_q5_0(row, out)
    elif code == Q4_0:
        decode_q4_0(row, out)
    elif code == Q4_1:
        decode_q4_1(row, out)
    elif code == Q5_1:
        decode_q5_1(row, out)
    elif code == Q5_K:
        decode_k_quant(row, out, 176, 16, 48)
    elif code == Q2_K:
        decode_q2_k(row, out)
    elif code == Q3_K:
        decode_q3_k(row, out)
    elif code == IQ4_NL:
        decode_iq4_nl(row, out)
    elif code == IQ4_XS:
        decode_iq4_xs(row, out)
    elif code == IQ2_XXS:
        decode_iq2_xxs(row, out)
    elif code == IQ3_XXS:
        decode_iq3_xxs(row, out)
    elif code == F16 or code == BF16 or code == F32:
        decode_float_row(code, row, out)
    elif code >= R_Q5_0:  # the CPU's run layout of Q5_0, Q4_0, Q4_K, Q6_K, Q8_0 (run_layout.py)
        _decode_run_row(code, row, out)


@njit(cache=True)
def _decode_run_row(code, row, out):
    """A call, not decode_run_row's inlined body: decode_row is inlined wherever it is used."""
    decode_run_row(code, row, out)


@njit(cache=True)
def decode_float_row(code, row, out):
    """A row of F32, F16 or BF16 (the fused dots' float types) into float32 `out`."""
    if code == F16:
        decode_f16(row, out)
    elif code == BF16:
        decode_bf16(row, out)
    else:
        decode_f32(row, out)
