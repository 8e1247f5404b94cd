"""Attention of one sequence's many prompt queries, as BLAS-sized score tiles with an online softmax.

The per-(token, head) kernel in attention.py does scalar q.k loops: fine for one decode query, but a third of
Gemma 3 270M's 512-token prefill (55 ms per layer, one thread). Here the queries of a block of tokens and the
heads sharing one KV head form the rows of one matrix, scores come from one GEMM per key chunk, and a
flash-attention style running max and sum keep memory at one [rows, key chunk] tile however long the context
(no T x T matrix): 12 ms per layer. With numpy's sgemm usable from numba threads (blas.py) the tiles run on every
thread (attend_sequence_parallel); otherwise numpy does the same tiles on the calling thread.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from kernels_numba.cpu.matvec.blas import NO_TRANS, TRANS, find_sgemm, sgemm
from kernels_numba.cpu.ir.fast_exp import exp_f32
from kernels_numba.cpu.ir.atomic_counter import claim_next, new_counter
from kernels_numba.cpu.kv_row import kv_row_into
from kernels_numba.cpu.parallel_policy import use_threads
from kernels_numba.reference_kv import dequantize_kv_rows

QUERY_BLOCK_TOKENS = 64  # query tokens per tile: 64 tokens x 4 heads x 512 keys = 512 KB of scores, L2-sized
KEY_CHUNK_TOKENS = 512  # keys per score tile (rounded to whole cache blocks)


def _gather_keys(cache: np.ndarray, kv_type: int, block_table: np.ndarray, kv_head: int, first: int,
                 stop: int) -> np.ndarray:
    """Positions first..stop-1 of one KV head from the paged cache [blocks, block_size, kv_heads, row] of type
    kv_type, as float32 [n, hd]."""
    block_size = cache.shape[1]
    first_block, stop_block = first // block_size, -(-stop // block_size)
    rows = np.asarray(cache[block_table[first_block:stop_block], :, kv_head]).reshape(-1, cache.shape[3])
    offset = first_block * block_size
    return dequantize_kv_rows(rows[first - offset:stop - offset], kv_type)


def _visible(row_pos: np.ndarray, first_key: int, num_keys: int, sliding_window: int) -> np.ndarray:
    """[rows, keys] mask: key first_key + j is visible from a query at row_pos (causal, llama.cpp SWA)."""
    distance = row_pos[:, None] - np.arange(first_key, first_key + num_keys)[None, :]
    visible = distance >= 0
    if sliding_window > 0:
        visible &= distance < sliding_window
    return visible


@njit(cache=True, inline="always")
def _first_visible(query_pos, sliding_window):
    """Oldest key a query at query_pos sees (llama.cpp masks query_pos - key_pos >= sliding_window)."""
    return 0 if sliding_window <= 0 else max(0, query_pos - sliding_window + 1)


def attend_block(queries: np.ndarray, row_pos: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, kv_type: int,
                 block_table: np.ndarray, kv_head: int, scale: float, sliding_window: int,
                 softcap: float) -> np.ndarray:
    """softmax(scale * queries @ keys.T) @ values for rows queries: [rows, hd] at positions row_pos: [rows]."""
    low, high = _first_visible(int(row_pos.min()), sliding_window), int(row_pos.max()) + 1
    block_size = k_cache.shape[1]
    chunk = max(block_size, KEY_CHUNK_TOKENS // block_size * block_size)
    running_max = np.full(queries.shape[0], -np.inf, dtype=np.float32)
    running_sum = np.zeros(queries.shape[0], dtype=np.float32)
    acc = np.zeros(queries.shape, dtype=np.float32)
    scaled = queries * np.float32(scale)
    for first in range(low - low % block_size, high, chunk):
        first, stop = max(first, low), min(first + chunk, high)
        scores = scaled @ _gather_keys(k_cache, kv_type, block_table, kv_head, first, stop).T  # [rows, keys]
        if softcap > 0:
            scores = np.float32(softcap) * np.tanh(scores / np.float32(softcap))
        # every key is visible to every row only when the chunk ends before the first row and starts in its window
        if stop - 1 > row_pos.min() or first < _first_visible(int(row_pos.max()), sliding_window):
            scores[~_visible(row_pos, first, stop - first, sliding_window)] = -np.inf
        new_max = np.maximum(running_max, scores.max(axis=1))
        shift = np.where(np.isfinite(new_max), new_max, np.float32(0.0))  # a row with no visible key yet: no NaN
        weights = np.exp(scores - shift[:, None])
        correction = np.exp(running_max - shift)
        running_sum = running_sum * correction + weights.sum(axis=1)
        acc *= correction[:, None]
        acc += weights @ _gather_keys(v_cache, kv_type, block_table, kv_head, first, stop)
        running_max = new_max
    return acc / running_sum[:, None]


def attend_sequence_numpy(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, kv_type: int,
                          block_table: np.ndarray, context_len: int, scale: float, sliding_window: int, softcap: float,
                          out: np.ndarray) -> None:
    """attend_sequence on the calling thread with numpy's matmul (when no sgemm is usable from numba threads)."""
    num_queries, num_heads, head_dim = q.shape
    group_size = num_heads // k_cache.shape[2]
    first_pos = context_len - num_queries
    for kv_head in range(k_cache.shape[2]):
        heads = slice(kv_head * group_size, (kv_head + 1) * group_size)
        for start in range(0, num_queries, QUERY_BLOCK_TOKENS):
            stop = min(start + QUERY_BLOCK_TOKENS, num_queries)
            queries = q[start:stop, heads].reshape(-1, head_dim)  # rows: token-major, then the group's heads
            row_pos = np.repeat(np.arange(first_pos + start, first_pos + stop), group_size)
            result = attend_block(queries, row_pos, k_cache, v_cache, kv_type, block_table, kv_head, scale,
                                  sliding_window, softcap)
            out[start:stop, heads] = result.reshape(stop - start, group_size, head_dim)


# --- the same tiles on every numba thread, GEMMs through numpy's sgemm (blas.py) -------------------------------


@njit(cache=True, nogil=True, error_model="numpy")
def _softmax_chunk_rows(scores, num_rows, num_keys, first_key, first_pos, group_size, sliding_window, softcap,
                        running_max, running_sum, acc):
    """Masks and soft-caps one chunk's scores, turns them into weights against each row's running max, and
    rescales that row's sum and accumulator to the new max (online softmax)."""
    for row in range(num_rows):
        query_pos = first_pos + row // group_size
        low = _first_visible(query_pos, sliding_window)
        row_scores = scores[row, :num_keys]
        chunk_max = np.float32(-np.inf)
        for j in range(num_keys):
            score = row_scores[j]
            if softcap > 0:
                score = softcap * np.float32(math.tanh(score / softcap))
            key_pos = first_key + j
            score = score if low <= key_pos <= query_pos else np.float32(-np.inf)
            row_scores[j] = score
            chunk_max = max(chunk_max, score)
        new_max = max(running_max[row], chunk_max)
        shift = new_max if new_max > -np.inf else np.float32(0.0)  # no visible key yet: weights stay 0
        total = np.float32(0.0)
        for j in range(num_keys):
            weight = exp_f32(row_scores[j] - shift) if row_scores[j] > -np.inf else np.float32(0.0)
            row_scores[j] = weight
            total += weight
        correction = exp_f32(running_max[row] - shift) if running_max[row] > -np.inf else np.float32(0.0)
        running_sum[row] = running_sum[row] * correction + total
        for d in range(acc.shape[1]):
            acc[row, d] *= correction
        running_max[row] = new_max


@njit(cache=True, nogil=True)
def _gather_chunk(cache, kv_type, block_table, kv_head, first, stop, rows):
    block_size = cache.shape[1]
    for j in range(stop - first):
        pos = first + j
        kv_row_into(cache, kv_type, block_table[pos // block_size], pos % block_size, kv_head, rows[j])


@njit(cache=True, nogil=True)
def attend_block_into(q, k_cache, v_cache, kv_type, block_table, kv_head, first_token, stop_token, first_pos, scale,
                      sliding_window, softcap, out, queries, keys, values, scores, acc, running_max, running_sum,
                      sgemm_address, ilp64):
    """attend_block for tokens first_token..stop_token-1 and the heads of kv_head, in preallocated buffers."""
    head_dim, group_size = q.shape[2], q.shape[1] // k_cache.shape[2]
    num_rows = (stop_token - first_token) * group_size
    for t in range(first_token, stop_token):
        for h in range(group_size):
            row = (t - first_token) * group_size + h
            for d in range(head_dim):
                queries[row, d] = q[t, kv_head * group_size + h, d] * scale
    running_max[:num_rows] = -np.inf
    running_sum[:num_rows] = 0.0
    acc[:num_rows] = 0.0
    block_size, chunk = k_cache.shape[1], keys.shape[0]
    low, high = _first_visible(first_pos + first_token, sliding_window), first_pos + stop_token
    for chunk_start in range(low - low % block_size, high, chunk):
        first, stop = max(chunk_start, low), min(chunk_start + chunk, high)
        _gather_chunk(k_cache, kv_type, block_table, kv_head, first, stop, keys)
        _gather_chunk(v_cache, kv_type, block_table, kv_head, first, stop, values)
        sgemm(sgemm_address, ilp64, TRANS, num_rows, stop - first, head_dim, queries.ctypes.data, head_dim,
              keys.ctypes.data, head_dim, np.float32(0.0), scores.ctypes.data, chunk)
        _softmax_chunk_rows(scores, num_rows, stop - first, first, first_pos + first_token, group_size,
                            sliding_window, softcap, running_max, running_sum, acc)
        sgemm(sgemm_address, ilp64, NO_TRANS, num_rows, head_dim, stop - first, scores.ctypes.data, chunk,
              values.ctypes.data, head_dim, np.float32(1.0), acc.ctypes.data, head_dim)
    for t in range(first_token, stop_token):
        for h in range(group_size):
            row = (t - first_token) * group_size + h
            total = running_sum[row]  # 0 only where NaN scores kept every weight out: NaN, not ZeroDivisionError
            inverse_sum = np.float32(1.0) / total if total != 0 else np.float32(np.nan)
            for d in range(head_dim):
                out[t, kv_head * group_size + h, d] = acc[row, d] * inverse_sum


@njit(cache=True, nogil=True, parallel=True)
def attend_sequence_parallel(q, k_cache, v_cache, kv_type, block_table, context_len, scale, sliding_window, softcap,
                             out, block_tokens, chunk_keys, sgemm_address, ilp64, num_workers):
    """attend_sequence with its (kv head, query block) tiles taken by `num_workers` threads from a shared counter,
    the last query blocks (the most keys) first, so a thread that loses its core leaves its tiles to the others
    (ir/atomic_counter.py; each tile writes only its own rows of out)."""
    num_queries, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    rows = block_tokens * (num_heads // num_kv_heads)
    num_blocks = (num_queries + block_tokens - 1) // block_tokens
    num_tasks = num_blocks * num_kv_heads
    counter = new_counter()
    for worker in prange(num_workers):
        queries, acc = np.empty((rows, head_dim), np.float32), np.empty((rows, head_dim), np.float32)
        keys, values = np.empty((chunk_keys, head_dim), np.float32), np.empty((chunk_keys, head_dim), np.float32)
        scores = np.empty((rows, chunk_keys), np.float32)
        running_max, running_sum = np.empty(rows, np.float32), np.empty(rows, np.float32)
        claimed = claim_next(counter)
        while claimed < num_tasks:
            task = num_tasks - 1 - claimed  # later query blocks see more keys: the longest tiles first
            block, kv_head = task // num_kv_heads, task % num_kv_heads
            first = block * block_tokens
            attend_block_into(q, k_cache, v_cache, kv_type, block_table, kv_head, first,
                              min(num_queries, first + block_tokens),
                              context_len - num_queries, scale, sliding_window, softcap, out, queries, keys, values,
                              scores, acc, running_max, running_sum, sgemm_address, ilp64)
            claimed = claim_next(counter)


def attend_sequence(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, kv_type: int, block_table: np.ndarray,
                    context_len: int, scale: float, sliding_window: int, softcap: float, out: np.ndarray) -> None:
    """out = attention of q: [nq, heads, hd], the last nq of context_len cached tokens of one sequence; caches of
    KV type kv_type, each chunk of keys and values decoded into the tiles' float32 buffers."""
    sgemm_found = find_sgemm()
    if sgemm_found is None:
        attend_sequence_numpy(q, k_cache, v_cache, kv_type, block_table, context_len, scale, sliding_window, softcap,
                              out)
        return
    block_size = k_cache.shape[1]
    chunk_keys = max(block_size, KEY_CHUNK_TOKENS // block_size * block_size)
    work = q.shape[0] * q.shape[1] * q.shape[2] * min(context_len, sliding_window or context_len)
    workers = numba.get_num_threads() if use_threads(work) else 1
    attend_sequence_parallel(q, k_cache, v_cache, kv_type, block_table, context_len, np.float32(scale),
                             int(sliding_window),
                             np.float32(softcap), out, QUERY_BLOCK_TOKENS, chunk_keys, sgemm_found.address,
                             sgemm_found.ilp64, workers)
