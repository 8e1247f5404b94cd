"""paged_attention on the device: one warp per (query token, head), online softmax over the visible keys.

Each lane holds head_dim / 32 dimensions of q and of the running output; a key's score is a warp-shuffle sum.
The grid depends on the number of query tokens only, so a captured decode step replays at any context length.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty
from kernels_numba.cuda.kv_row import kv_value
from kernels_numba.cuda.launch_shape import WARPS_PER_BLOCK, row_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.warp_reduce import WARP_SIZE, warp_sum
from kernels_numba.kv_type import kv_type_of

MAX_DIMS_PER_LANE = 8  # head_dim <= 256


@cuda.jit(device=True)
def sequence_of(token, query_start_loc):
    seq = 0
    while query_start_loc[seq + 1] <= token:
        seq += 1
    return seq


@cuda.jit
def paged_attention_kernel(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, scale,
                           sliding_window, softcap, out):
    first_pair = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // WARP_SIZE
    for pair in range(first_pair, q.shape[0] * q.shape[1], cuda.gridDim.x * WARPS_PER_BLOCK):
        attend(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, scale, sliding_window,
               softcap, out, pair, cuda.threadIdx.x % WARP_SIZE)


@cuda.jit(device=True)
def attend(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, scale, sliding_window, softcap,
           out, pair, lane):
    """Query `pair` (token * heads + head) against its sequence's visible keys; one warp, lane `lane`; each lane
    decodes its own dimensions of a key (value) row from the cache's KV type (kv_row.kv_value)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    token, head = pair // num_heads, pair % num_heads
    kv_head = head // (num_heads // k_cache.shape[2])
    seq = sequence_of(token, query_start_loc)
    num_ctx = context_lens[seq]
    query_pos = num_ctx - (query_start_loc[seq + 1] - token)
    first_key = 0 if sliding_window <= 0 else max(0, query_pos - sliding_window + 1)
    q_lane = cuda.local.array(MAX_DIMS_PER_LANE, np.float32)
    acc = cuda.local.array(MAX_DIMS_PER_LANE, np.float32)
    for i in range(MAX_DIMS_PER_LANE):
        d = lane + WARP_SIZE * i
        q_lane[i] = q[token, head, d] if d < head_dim else np.float32(0.0)
        acc[i] = np.float32(0.0)
    running_max, running_sum = np.float32(-math.inf), np.float32(0.0)
    block_size = k_cache.shape[1]
    for key_pos in range(first_key, query_pos + 1):
        block, offset = block_tables[seq, key_pos // block_size], key_pos % block_size
        partial = np.float32(0.0)
        for i in range(MAX_DIMS_PER_LANE):
            d = lane + WARP_SIZE * i
            if d < head_dim:
                partial += q_lane[i] * kv_value(k_cache, kv_type, block, offset, kv_head, d)
        score = warp_sum(partial) * scale
        if softcap > 0:
            score = softcap * math.tanh(score / softcap)
        new_max = max(running_max, score)
        correction, weight = math.exp(running_max - new_max), math.exp(score - new_max)
        running_sum = running_sum * correction + weight
        for i in range(MAX_DIMS_PER_LANE):
            d = lane + WARP_SIZE * i
            if d < head_dim:
                acc[i] = acc[i] * correction + weight * kv_value(v_cache, kv_type, block, offset, kv_head, d)
        running_max = new_max
    for i in range(MAX_DIMS_PER_LANE):
        d = lane + WARP_SIZE * i
        if d < head_dim:
            out[token, head, d] = acc[i] / running_sum


def paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, sliding_window=0,
                    softcap=0.0, out=None):
    """Causal (optionally sliding-window, soft-capped) attention of q: [n, heads, head_dim] over a paged cache."""
    q = as_device(q)
    if q.shape[2] > WARP_SIZE * MAX_DIMS_PER_LANE:
        raise ValueError(f"cuda paged_attention supports head_dim <= {WARP_SIZE * MAX_DIMS_PER_LANE}, "
                         f"got {q.shape[2]}")
    tables = as_device(block_tables, np.int32)
    lens, starts = as_device(context_lens, np.int32), as_device(query_start_loc, np.int32)
    result = empty(tuple(q.shape), np.float32, out)
    pairs = q.shape[0] * q.shape[1]
    if pairs:
        paged_attention_kernel[row_blocks(pairs), WARPS_PER_BLOCK * WARP_SIZE, current_stream()](
            q, k_cache, v_cache, kv_type_of(k_cache), tables, lens, starts, np.float32(scale), int(sliding_window),
            np.float32(softcap), result)
    return result
