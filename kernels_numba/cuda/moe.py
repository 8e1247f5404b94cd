"""Mixture-of-experts ops on the device: routing, the expert mat-vec over stacked weights, the weighted combine.

Same signatures as kernels_numba/cpu/moe.py. The expert ids stay on the device from route to mat-vec (no host
sync): token row i's mat-vec reads only its expert's rows of the stacked, still quantized weight, decoding them
in registers (value_decode), in matvec.py's row groups and warp tiles. Rows routed to one expert
are not batched into one weight pass yet (a prefill reads an expert's rows once per routed token).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty
from kernels_numba.cuda.device_weight import upload_weight
from kernels_numba.cuda.launch_shape import MATVEC_WARPS, MAX_GRID_Y, THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.matvec import (PADDED_TILE, ROWS_PER_WARP, TOKENS_PER_PASS, group_partials, matvec_grid,
                                       num_groups, store_group)
from kernels_numba.cuda.warp_reduce import WARP_SIZE


@cuda.jit(device=True)
def ranks_before(value, e, best_value, best):
    """Whether expert e (logit `value`) comes before `best` in (probability desc, id asc) order."""
    return best < 0 or value > best_value or (value == best_value and e < best)


@cuda.jit
def route_kernel(logits, top_k, normalize, expert_ids, weights):
    """One thread per row of logits [n, E]: softmax (float64), then the top_k in (probability desc, id asc) order,
    each pick the best expert ranked after the previous pick (no per-thread scratch array)."""
    num_rows, num_experts = logits.shape
    for row in range(cuda.grid(1), num_rows, cuda.gridsize(1)):
        peak = np.float64(logits[row, 0])
        for e in range(1, num_experts):
            peak = max(peak, np.float64(logits[row, e]))
        total = np.float64(0.0)
        for e in range(num_experts):
            total += math.exp(np.float64(logits[row, e]) - peak)
        chosen_sum = np.float64(0.0)
        previous = -1
        for j in range(top_k):
            best, best_value = -1, np.float32(0.0)
            for e in range(num_experts):
                value = logits[row, e]
                after_previous = previous < 0 or (e != previous and
                                                     not ranks_before(value, e, logits[row, previous], previous))
                if after_previous and ranks_before(value, e, best_value, best):
                    best, best_value = e, value
            previous = best
            expert_ids[row, j] = best
            chosen_sum += math.exp(np.float64(best_value) - peak) / total
        scale = chosen_sum if normalize else np.float64(1.0)
        for j in range(top_k):
            weights[row, j] = math.exp(np.float64(logits[row, expert_ids[row, j]]) - peak) / total / scale


@cuda.jit
def expert_matvec_kernel(data, code, scales, block_rows, block_cols, rows_per_expert, x, expert_ids, out):
    """out[i, r] = sum_j W_e[r, j] * x[i, j] with e = expert_ids[i] (stacked row e * rows_per_expert + r): warps
    own groups of ROWS_PER_WARP rows of token row i's expert as in matvec_kernel, one token at a time; groups
    stride over the grid's warps, token rows over its height."""
    sums = cuda.local.array((TOKENS_PER_PASS, ROWS_PER_WARP), np.float32)
    tile = cuda.shared.array((MATVEC_WARPS, WARP_SIZE, PADDED_TILE), np.float32)
    first_group = cuda.blockIdx.x * MATVEC_WARPS + cuda.threadIdx.x // WARP_SIZE
    for i in range(cuda.blockIdx.y, x.shape[0], cuda.gridDim.y):
        base = expert_ids[i] * rows_per_expert
        for group in range(first_group, num_groups(rows_per_expert), cuda.gridDim.x * MATVEC_WARPS):
            first_row = group * ROWS_PER_WARP
            group_partials(data, base + first_row, base + rows_per_expert, code, scales, block_rows, block_cols,
                           x, i, 1, sums)
            store_group(sums, tile, out, first_row, i, 1)


@cuda.jit
def combine_kernel(expert_out, weights, out):
    """out[i, d] = sum_j weights[i, j] * expert_out[i * top_k + j, d]; one thread per output value."""
    num_rows, top_k = weights.shape
    dim = expert_out.shape[1]
    for flat in range(cuda.grid(1), num_rows * dim, cuda.gridsize(1)):
        i, d = flat // dim, flat % dim
        total = np.float32(0.0)
        for j in range(top_k):
            total += weights[i, j] * expert_out[i * top_k + j, d]
        out[i, d] = total


def moe_route(router_logits, top_k: int, normalize: bool):
    """router_logits: [n, num_experts] -> (expert ids int64 [n, top_k], weights float32 [n, top_k]), on the device."""
    logits = as_device(router_logits)
    num_rows, num_experts = logits.shape
    if not 0 < top_k <= num_experts:
        raise ValueError(f"moe_route: top_k {top_k} outside 1..{num_experts}")
    expert_ids = empty((num_rows, top_k), np.int64)
    weights = empty((num_rows, top_k), np.float32)
    if num_rows:
        route_kernel[flat_blocks(num_rows), THREADS, current_stream()](logits, int(top_k), bool(normalize),
                                                                       expert_ids, weights)
    return expert_ids, weights


def _flat_ids(expert_ids):
    if hasattr(expert_ids, "copy_to_host"):
        return expert_ids.reshape(expert_ids.size)
    return as_device(np.asarray(expert_ids, dtype=np.int64).reshape(-1), np.int64)


def moe_linear(x, w, expert_ids, out=None):
    """Row i of the result = x[i] @ W[expert_ids[i]].T, x: [r, cols], w: (num_experts, rows, cols) -> [r, rows]."""
    dw = upload_weight(w)
    x, expert_ids = as_device(x), _flat_ids(expert_ids)
    if len(dw.shape) != 3 or x.ndim != 2 or tuple(x.shape) != (expert_ids.size, dw.row_length):
        raise ValueError(f"moe_linear {dw.name!r}: x {tuple(x.shape)}, {expert_ids.size} expert ids, "
                         f"weights {dw.shape}")
    rows_per_expert = dw.shape[-2]
    out = empty((x.shape[0], rows_per_expert), np.float32, out)
    if x.shape[0]:
        grid = (matvec_grid(rows_per_expert, 1)[0], min(x.shape[0], MAX_GRID_Y))
        expert_matvec_kernel[grid, MATVEC_WARPS * WARP_SIZE, current_stream()](
            dw.data, dw.code, dw.scales, dw.block_rows, dw.block_cols, rows_per_expert, x, expert_ids, out)
    return out


def moe_combine(expert_out, weights, out=None):
    """expert_out: [n * top_k, d] (token-major), weights: [n, top_k] -> the weighted sum per token [n, d]."""
    expert_out, weights = as_device(expert_out), as_device(weights)
    out = empty((weights.shape[0], expert_out.shape[1]), np.float32, out)
    if out.size:
        combine_kernel[flat_blocks(out.size), THREADS, current_stream()](expert_out, weights, out)
    return out
