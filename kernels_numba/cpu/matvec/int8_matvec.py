"""out = x @ W.T with 8-bit activations (int8_dot) for the weight types that have an integer dot kernel.

Every token's dots run the same kernel in the same order whatever the number of tokens, so one token decoded
alone and the same token inside a speculative verify batch get bit-identical logits (greedy speculation stays
lossless). Row groups are split across threads as in matmul.matvec_into; all tokens of a group are done while
its rows sit in L1.
"""
import numpy as np
from numba import njit, prange, types

from kernels_numba.cpu.ir.native_call import call_native, handle_at, handles_array, native_kernel
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.int8_dot import (PREFETCH_BYTES, TOKENS_PER_PASS, ZERO_POINTS, int8_dots,
                                               lane_operands_into, quantize_activations)
from kernels_numba.cpu.matvec.leaf_types import OUT_TYPE, WEIGHTS_TYPE
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, chunk_span, pool_threads

ROWS_PER_GROUP = 4
INT8_CODES = (qt.Q8_0, qt.Q5_0, qt.Q4_0, qt.Q4_1, qt.Q6_K, qt.Q4_K)


@njit(cache=True)
def groups_into(code, data, x8, out, first_group, stop_group):
    """The leaf, compiled per literal weight type code (`groups_kernel`): row groups first_group..stop_group-1,
    tokens in passes of TOKENS_PER_PASS, then one at a time (a (row, token) dot is the same IR either way)."""
    last = data.shape[0] - 1
    quants, lane_scales, lane_starts, block_sums = x8
    num_tokens = quants.shape[0]
    for group in range(first_group, stop_group):
        first_row = group * ROWS_PER_GROUP
        ra, rb, rc, rd = first_row, min(first_row + 1, last), min(first_row + 2, last), min(first_row + 3, last)
        num_rows = min(ROWS_PER_GROUP, data.shape[0] - first_row)
        t = 0
        while t + TOKENS_PER_PASS <= num_tokens:
            prefetch_bytes = PREFETCH_BYTES if t == 0 else 0
            dots = int8_dots(code, TOKENS_PER_PASS, data, ra, rb, rc, rd, quants, lane_scales, lane_starts,
                             block_sums, t, prefetch_bytes)
            for token in range(TOKENS_PER_PASS):
                for g in range(num_rows):
                    out[t + token, first_row + g] = dots[ROWS_PER_GROUP * token + g]
            t += TOKENS_PER_PASS
        while t < num_tokens:
            prefetch_bytes = PREFETCH_BYTES if t == 0 else 0
            dots = int8_dots(code, 1, data, ra, rb, rc, rd, quants, lane_scales, lane_starts, block_sums, t,
                             prefetch_bytes)
            for g in range(num_rows):
                out[t, first_row + g] = dots[g]
            t += 1


X8_TYPE = types.Tuple((types.Array(types.int8, 2, "C"), types.Array(types.float32, 2, "C"),
                       types.Array(types.int32, 2, "C"), types.Array(types.float32, 2, "C")))


def groups_kernel(code: int) -> np.ndarray:
    """The leaf handle (ir/native_call.py) of weight type `code` (one of INT8_CODES), as a [1, 2] handles array."""
    return handles_array([native_kernel(groups_into, (types.literal(code), WEIGHTS_TYPE, X8_TYPE, OUT_TYPE,
                                                      types.int64, types.int64))])


@njit(cache=True)
def _groups_into(groups, code, data, x8, out, first_group, stop_group):
    call_native(handle_at(groups, 0), (code, data, x8, out, first_group, stop_group))


@njit(cache=True, nogil=True, parallel=True)
def _parallel_into(groups, code, data, x8, out, chunks):
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    for chunk in prange(chunks):
        first, stop = chunk_span(chunk, chunks, num_groups)
        _groups_into(groups, code, data, x8, out, first, stop)


_Q8_0_ZERO, _Q5_0_ZERO, _Q4_0_ZERO, _Q6_K_ZERO, _Q4_K_ZERO = (ZERO_POINTS[name]
                                                               for name in ("Q8_0", "Q5_0", "Q4_0", "Q6_K", "Q4_K"))


@njit(cache=True, inline="always")
def zero_point(code):
    """The unsigned quants' offset of a type of INT8_CODES (the value is d * (q - zero point); Q4_1 and Q4_K: 0)."""
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
def int8_matvec_into(groups, code, data, x, out):
    """out[t] = dot of every row of data (a type of INT8_CODES) with x[t] quantized to 8 bits (x: float32 [n, k]);
    groups: groups_kernel(code)."""
    int8_matvec_quantized_into(groups, code, data, quantize_activations(x), out)


@njit(cache=True)
def int8_matvec_quantized_into(groups, code, data, quantized, out):
    """int8_matvec_into of activations already quantized (int8_dot.quantize_activations(x)): mat-vecs that share
    an input quantize it once."""
    quants, scales, lane_sums, block_sums = quantized
    k = quants.shape[1]
    x8 = activation_operands(code, quants, scales, lane_sums, block_sums)
    threads = pool_threads()
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    if threads > 1 and data.shape[0] * k >= PARALLEL_MIN_WORK:
        _parallel_into(groups, code, data, x8, out, max(1, min(num_groups, CHUNKS_PER_THREAD * threads)))
    else:
        _groups_into(groups, code, data, x8, out, np.int64(0), num_groups)
