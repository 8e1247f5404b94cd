"""out = x @ W.T with 8-bit activations (int8_dot) for the weight types that have an integer dot kernel.

Every token's dots run the same kernel in the same order whatever the number of tokens, so one token decoded
alone and the same token inside a speculative verify batch get bit-identical logits (greedy speculation stays
lossless). Row groups are split across threads as in matmul.matvec_into; all tokens of a group are done while
its rows sit in L1.
"""
import numpy as np
from numba import njit, prange

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.amx_matvec import amx_matvec_into, uses_amx
from kernels_numba.cpu.matvec.int8_dot import (PREFETCH_BYTES, TOKENS_PER_PASS, ZERO_POINTS, lane_operands_into, q4_0_dot4,
                                        q4_0_dot4x4, q4_k_dot4, q4_k_dot4x4, q5_0_dot4, q5_0_dot4x4, q6_k_dot4,
                                        q6_k_dot4x4, q8_0_dot4, q8_0_dot4x4, quantize_activations)
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, chunk_span, pool_threads

ROWS_PER_GROUP = 4
INT8_CODES = (qt.Q8_0, qt.Q5_0, qt.Q4_0, qt.Q6_K, qt.Q4_K)


def _dispatch_on_type(q8_0, q5_0, q4_0, q6_k, q4_k):
    """A (code, data, ra..rd, x8, t, prefetch_bytes) -> dots function calling the given intrinsic of each type.
    x8: the 8-bit activations (quants, lane_scales, lane_starts, block_sums) of activation_operands."""
    @njit(inline="always")
    def dots(code, data, ra, rb, rc, rd, x8, t, prefetch_bytes):
        if code == qt.Q8_0:
            return q8_0(data, ra, rb, rc, rd, *x8, t, prefetch_bytes)
        if code == qt.Q5_0:
            return q5_0(data, ra, rb, rc, rd, *x8, t, prefetch_bytes)
        if code == qt.Q4_0:
            return q4_0(data, ra, rb, rc, rd, *x8, t, prefetch_bytes)
        if code == qt.Q6_K:
            return q6_k(data, ra, rb, rc, rd, *x8, t, prefetch_bytes)
        return q4_k(data, ra, rb, rc, rd, *x8, t, prefetch_bytes)
    return dots


_dot4 = _dispatch_on_type(q8_0_dot4, q5_0_dot4, q4_0_dot4, q6_k_dot4, q4_k_dot4)  # rows ra..rd, token t
# rows ra..rd, tokens t..t+3 (token-major: index 4 * token + row); each weight block is unpacked once
_dot4x4 = _dispatch_on_type(q8_0_dot4x4, q5_0_dot4x4, q4_0_dot4x4, q6_k_dot4x4, q4_k_dot4x4)


@njit(cache=True)
def _groups_into(code, data, x8, out, first_group, stop_group):
    """Tokens in passes of TOKENS_PER_PASS, then one at a time: a (row, token) dot is the same IR either way."""
    last = data.shape[0] - 1
    num_tokens = x8[0].shape[0]
    for group in range(first_group, stop_group):
        first_row = group * ROWS_PER_GROUP
        ra, rb, rc, rd = first_row, min(first_row + 1, last), min(first_row + 2, last), min(first_row + 3, last)
        num_rows = min(ROWS_PER_GROUP, data.shape[0] - first_row)
        t = 0
        while t + TOKENS_PER_PASS <= num_tokens:
            dots = _dot4x4(code, data, ra, rb, rc, rd, x8, t, PREFETCH_BYTES if t == 0 else 0)
            for token in range(TOKENS_PER_PASS):
                for g in range(num_rows):
                    out[t + token, first_row + g] = dots[ROWS_PER_GROUP * token + g]
            t += TOKENS_PER_PASS
        while t < num_tokens:
            dots = _dot4(code, data, ra, rb, rc, rd, x8, t, PREFETCH_BYTES if t == 0 else 0)
            for g in range(num_rows):
                out[t, first_row + g] = dots[g]
            t += 1


@njit(cache=True, parallel=True)
def _parallel_into(code, data, x8, out, chunks):
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    for chunk in prange(chunks):
        first, stop = chunk_span(chunk, chunks, num_groups)
        _groups_into(code, data, x8, out, first, stop)


_Q8_0_ZERO, _Q5_0_ZERO, _Q4_0_ZERO, _Q6_K_ZERO, _Q4_K_ZERO = (ZERO_POINTS[name]
                                                               for name in ("Q8_0", "Q5_0", "Q4_0", "Q6_K", "Q4_K"))


@njit(cache=True, inline="always")
def zero_point(code):
    """The unsigned quants' offset of a type of INT8_CODES (the value is d * (q - zero point))."""
    if code == qt.Q8_0:
        return _Q8_0_ZERO
    if code == qt.Q5_0:
        return _Q5_0_ZERO
    if code == qt.Q4_0:
        return _Q4_0_ZERO
    return _Q6_K_ZERO if code == qt.Q6_K else _Q4_K_ZERO


@njit(cache=True)
def activation_operands(code, quants, scales, lane_sums, block_sums):
    """x8, what the dots of weight type `code` read: (quants, lane scales, lane starts, block sums)."""
    lane_scales = np.empty(lane_sums.shape, dtype=np.float32)
    lane_starts = np.empty_like(lane_sums)
    lane_operands_into(scales, lane_sums, zero_point(code), lane_scales, lane_starts)
    return quants, lane_scales, lane_starts, block_sums


@njit(cache=True)
def int8_matvec_into(code, data, x, out):
    """out[t] = dot of every row of data (a type of INT8_CODES) with x[t] quantized to 8 bits (x: float32 [n, k])."""
    int8_matvec_quantized_into(code, data, quantize_activations(x), out)


@njit(cache=True)
def int8_matvec_quantized_into(code, data, quantized, out):
    """int8_matvec_into of activations already quantized (int8_dot.quantize_activations(x)): mat-vecs that share
    an input quantize it once."""
    quants, scales, lane_sums, block_sums = quantized
    k = quants.shape[1]
    if uses_amx(code):  # AMX tiles where the CPU has them: the same for every n, like the dots below
        amx_matvec_into(data, quants, scales, out)
        return
    x8 = activation_operands(code, quants, scales, lane_sums, block_sums)
    threads = pool_threads()
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    if threads > 1 and data.shape[0] * k >= PARALLEL_MIN_WORK:
        _parallel_into(code, data, x8, out, max(1, min(num_groups, CHUNKS_PER_THREAD * threads)))
    else:
        _groups_into(code, data, x8, out, 0, num_groups)
