"""Mixture-of-experts ops (numba CPU): routing, per-expert mat-vecs over stacked weights, weighted combine.

`moe_linear` groups the rows routed to each expert and runs the quantized `linear` kernel on a zero-copy view of
that expert's rows, so only the chosen experts' weights are read, and a prefill multiplies all tokens routed to
one expert together. Same signatures as kernels_numba/reference_moe.py.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.cpu.matvec.dispatch import linear
from kernels_numba.cpu.matvec.matmul import block_sums
from kernels_numba.cpu.parallel_policy import num_chunks, use_threads
from kernels_numba.cpu.matvec.row_dot import ROWS_PER_GROUP, dot_group_into
from kernels_numba.reference_moe import expert_view

MAX_FUSED_ROWS_PER_EXPERT = 2  # decode: one fused pass over (row, expert) pairs; more rows: per-expert linear


@njit(cache=True, nogil=True)
def route_rows_into(logits, top_k, normalize, expert_ids, weights):
    """Softmax of each row of logits [n, E] (float64), its top_k entries by repeated argmax (ties: lower id)."""
    n, num_experts = logits.shape
    probs = np.empty(num_experts, dtype=np.float64)
    taken = np.zeros(num_experts, dtype=np.bool_)
    for i in range(n):
        peak = logits[i, 0]
        for e in range(1, num_experts):
            peak = max(peak, logits[i, e])
        total = 0.0
        for e in range(num_experts):
            probs[e] = np.exp(np.float64(logits[i, e]) - peak)
            total += probs[e]
            taken[e] = False
        chosen_sum = 0.0
        for j in range(top_k):
            best = -1
            for e in range(num_experts):
                if not taken[e] and (best < 0 or probs[e] > probs[best]):
                    best = e
            taken[best] = True
            expert_ids[i, j] = best
            weights[i, j] = probs[best] / total
            chosen_sum += probs[best] / total
        if normalize:
            for j in range(top_k):
                weights[i, j] /= chosen_sum


def moe_route(router_logits: np.ndarray, top_k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """router_logits: [n, num_experts] -> (expert ids int64 [n, top_k], weights float32 [n, top_k])."""
    logits = np.ascontiguousarray(router_logits, dtype=np.float32)
    if not 0 < top_k <= logits.shape[1]:
        raise ValueError(f"moe_route: top_k {top_k} outside 1..{logits.shape[1]}")
    expert_ids = np.empty((logits.shape[0], top_k), dtype=np.int64)
    weights = np.empty((logits.shape[0], top_k), dtype=np.float64)
    route_rows_into(logits, top_k, bool(normalize), expert_ids, weights)
    return expert_ids, weights.astype(np.float32)


@njit(cache=True, nogil=True, parallel=True)
def expert_matvec_into(code, data, rows_per_expert, x, x_sums, expert_ids, out, chunks):
    """out[i] = W[expert_ids[i]] @ x[i]: work items are (row i, row group of its expert), split into chunks;
    only the chosen experts' rows of the stacked `data` are read."""
    groups_per_expert = (rows_per_expert + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    num_items = x.shape[0] * groups_per_expert
    items_per_chunk = (num_items + chunks - 1) // chunks
    scratch_length = x.shape[1] if code in (qt.F32, qt.F16, qt.BF16) else 0
    for chunk in prange(chunks):
        scratch = np.empty(scratch_length, dtype=np.float32)
        for item in range(chunk * items_per_chunk, min(num_items, (chunk + 1) * items_per_chunk)):
            i, group = item // groups_per_expert, item % groups_per_expert
            first = expert_ids[i] * rows_per_expert
            expert_rows = data[first:first + rows_per_expert]  # a C-contiguous view: the kernels' usual types
            dot_group_into(code, expert_rows, group * ROWS_PER_GROUP, x[i:i + 1], x_sums[i:i + 1], scratch,
                           out[i:i + 1])


def _fused_expert_matvec(x: np.ndarray, w: WeightTensor, expert_ids: np.ndarray, out: np.ndarray) -> None:
    code, data = qt.type_code_of(w), readonly_bytes(w)
    rows_per_expert = w.shape[-2]
    num_items = x.shape[0] * -(-rows_per_expert // ROWS_PER_GROUP)
    if use_threads(x.shape[0] * rows_per_expert * x.shape[1]):
        expert_matvec_into(code, data, rows_per_expert, x, block_sums(code, x), expert_ids, out,
                           num_chunks(num_items))
    else:  # the parallel entry on one thread (see matmul.matvec_into: faster code than plain njit)
        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            expert_matvec_into(code, data, rows_per_expert, x, block_sums(code, x), expert_ids, out, 1)
        finally:
            numba.set_num_threads(threads)


def moe_linear(x: np.ndarray, w: WeightTensor, expert_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Row i of the result = x[i] @ W[expert_ids[i]].T, x: [r, cols], w: (num_experts, rows, cols) -> [r, rows]."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    expert_ids = np.asarray(expert_ids, dtype=np.int64).reshape(-1)
    if len(w.shape) != 3 or x.shape != (len(expert_ids), w.shape[-1]):
        raise ValueError(f"moe_linear {w.name!r}: x {x.shape}, {len(expert_ids)} expert ids, weights {w.shape}")
    if out is None:
        out = np.empty((x.shape[0], w.shape[-2]), dtype=np.float32)
    if w.fp8 is None and qt.type_code_of(w) != qt.F32 and \
            np.bincount(expert_ids).max() <= MAX_FUSED_ROWS_PER_EXPERT:
        _fused_expert_matvec(x, w, expert_ids, out)
        return out
    order = np.argsort(expert_ids, kind="stable")  # rows grouped by expert: one weight pass per expert
    bounds = np.flatnonzero(np.diff(expert_ids[order])) + 1
    for rows in np.split(order, bounds):
        if len(rows):
            out[rows] = linear(x[rows], expert_view(w, int(expert_ids[rows[0]])))
    return out


@njit(cache=True, nogil=True)
def combine_into(expert_out, weights, out):
    n, top_k = weights.shape
    dim = expert_out.shape[1]
    for i in range(n):
        for d in range(dim):
            total = np.float32(0.0)
            for j in range(top_k):
                total += weights[i, j] * expert_out[i * top_k + j, d]
            out[i, d] = total


def moe_combine(expert_out: np.ndarray, weights: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """expert_out: [n * top_k, d] (token-major), weights: [n, top_k] -> the weighted sum per token [n, d]."""
    expert_out = np.ascontiguousarray(expert_out, dtype=np.float32)
    weights = np.ascontiguousarray(weights, dtype=np.float32)
    if out is None:
        out = np.empty((weights.shape[0], expert_out.shape[1]), dtype=np.float32)
    combine_into(expert_out, weights, out)
    return out
