"""Causal attention over a paged KV cache, with GQA, llama.cpp-style sliding windows and soft-capping."""
import functools
import math

import numba
import numpy as np
from numba import njit, prange, types
from numba._dispatcher import compute_fingerprint

from kernels_numba.cpu.ir.fast_exp import exp_f32
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.ir.atomic_counter import claim_next, new_counter
from kernels_numba.cpu.ir.native_call import call_native, handle_at, handles_array, native_kernel
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, use_threads
from kernels_numba.cpu.ir.prefetch import CACHE_LINE_BYTES, prefetch_byte
from kernels_numba.cpu.ir.kv_rows import KEYS_A_GROUP, LANES, add_value_rows, key_scores_into
from kernels_numba.cpu.kv_row import kv_row
from kernels_numba.cpu.kv_store import cache_row_shape
from kernels_numba.cpu.prefill_attention import attend_sequence
from kernels_numba.kv_type import F16, F32, kv_type_of

MIN_BLOCKED_QUERIES = 16  # a sequence with this many queries (a prompt chunk) takes the GEMM-tiled path
# A query seeing more keys than this has them in spans of their own tasks (attend_tokens). SmolLM2 decode at 2000
# keys, 1 stream, AVX2 tier, 2 threads, alternated with the unsplit code (Intel Xeon, 2 vCPUs): 82.9 / 79.6 ->
# 100.6 / 93.5 tok/s; 800 keys 121.7 / 125.2 -> 133.5 / 133.3; 8 streams within noise. 256 measured no better.
SPLIT_KEYS = 512


@njit(cache=True)
def sequence_of_tokens(query_start_loc, num_tokens):
    """token index -> sequence index, from the query start offsets of each sequence."""
    token_seq = np.zeros(num_tokens, dtype=np.int64)
    for s in range(query_start_loc.size - 1):
        for t in range(query_start_loc[s], query_start_loc[s + 1]):
            token_seq[t] = s
    return token_seq


@njit(cache=True)
def first_visible_key(query_pos, sliding_window):
    """Oldest key position a query at `query_pos` sees: llama.cpp masks keys with query_pos - key_pos >= window."""
    if sliding_window <= 0:
        return 0
    return max(0, query_pos - sliding_window + 1)


# Keys go four at a time: each query (or accumulator) load then serves four keys (values), and the four dot
# products are independent chains. One (token, head), 61 keys, one thread: 6.1 -> 3.3-3.7 us; 500 keys: 50 -> 29 us.
# The four row views are written out: an inline helper returning them measured as slow as one key at a time.
KEYS_AT_ONCE = 4
VALUE_KEYS = 16  # keys whose value rows every head adds before the next ones (_attend_vector_rows)
PREFETCH_KEYS_AHEAD = 8  # key rows prefetched this many positions ahead of the scores, value rows of the sum


# The query heads of one kv head go together, key-major: the four key (value) rows stay in L1 while every head
# uses them, where one head at a time streamed the sequence's whole K and V through L2 once per head (Gemma 3
# 270M: 4 heads a kv head; one thread, 8 tokens x 45 keys 55.7 -> 39.8 us, x 500 keys 765 -> 537 us, 1 token x
# 2000 keys 568 -> 258 us; the same bits).
@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")  # a small wrapper: no compile of its own
def attend_heads(queries, k_cache, v_cache, kv_type, block_table, kv_head, first_key, last_key, scale, softcap,
                 out):
    """out[h] = softmax(scale * queries[h] . keys) @ values over key positions first_key..last_key of one sequence,
    for query heads queries: [heads, head_dim] that all read kv head kv_head. Each head's arithmetic is the same
    whatever heads share the call and whatever the batch, so a token's result does not depend on either."""
    acc = np.empty(queries.shape, dtype=np.float32)
    maxes = np.empty(queries.shape[0], dtype=np.float32)
    totals = attend_heads_unnormalised(queries, k_cache, v_cache, kv_type, block_table, kv_head, first_key, last_key,
                                       scale, softcap, acc, maxes)
    _normalised_into(acc, totals, out)


@njit(cache=True, fastmath=SUM_FASTMATH)
def attend_heads_unnormalised(queries, k_cache, v_cache, kv_type, block_table, kv_head, first_key, last_key, scale,
                              softcap, acc, maxes):
    """attend_heads before its division: acc[h] = sum over the keys of exp(score - maxes[h]) * value, maxes[h] the
    head's highest score; returns the exp weights' totals [heads] (out = acc / totals). Split keys (attend_tokens)
    merge these. A cache of another type than f32 (kv_type) is read a row at a time, each decoded into `rows`
    (kv_row). The weights are normalised once, at the end, not as each value row is added (LLVM had moved that
    division into the value loop: a vdivps each 8 values)."""
    num_heads, head_dim = queries.shape
    num_keys = last_key - first_key + 1
    scores = np.empty((num_heads, num_keys), dtype=np.float32)
    k_rows, v_rows = _rows(k_cache), _rows(v_cache)
    blocks, offsets, row_ids = _key_places(block_table, k_cache.shape[1], k_cache.shape[2], kv_head, first_key,
                                           num_keys)
    for h in range(num_heads):  # element loops: a slice assignment compiles its shape-error path (kv_store.py)
        for d in range(head_dim):
            acc[h, d] = 0.0
    if (kv_type == F16 or kv_type == F32) and head_dim % LANES == 0:
        return _attend_vector_rows(queries, k_rows, v_rows, row_ids, scale, softcap, scores, acc, maxes)
    rows = np.empty((KEYS_AT_ONCE, head_dim), dtype=np.float32)
    _prefetch_rows(k_rows, row_ids, 0, PREFETCH_KEYS_AHEAD)
    i = 0
    while i + KEYS_AT_ONCE <= num_keys:
        _prefetch_rows(k_rows, row_ids, i + PREFETCH_KEYS_AHEAD, i + PREFETCH_KEYS_AHEAD + KEYS_AT_ONCE)
        k0 = kv_row(k_cache, kv_type, blocks[i], offsets[i], kv_head, rows[0])
        k1 = kv_row(k_cache, kv_type, blocks[i + 1], offsets[i + 1], kv_head, rows[1])
        k2 = kv_row(k_cache, kv_type, blocks[i + 2], offsets[i + 2], kv_head, rows[2])
        k3 = kv_row(k_cache, kv_type, blocks[i + 3], offsets[i + 3], kv_head, rows[3])
        for h in range(num_heads):
            query = queries[h]
            s0 = s1 = s2 = s3 = np.float32(0.0)
            for d in range(head_dim):
                q = query[d]
                s0 += q * k0[d]
                s1 += q * k1[d]
                s2 += q * k2[d]
                s3 += q * k3[d]
            head_scores = scores[h]
            head_scores[i], head_scores[i + 1], head_scores[i + 2], head_scores[i + 3] = (
                s0 * scale, s1 * scale, s2 * scale, s3 * scale)
        i += KEYS_AT_ONCE
    while i < num_keys:
        key = kv_row(k_cache, kv_type, blocks[i], offsets[i], kv_head, rows[0])
        for h in range(num_heads):
            query = queries[h]
            score = np.float32(0.0)
            for d in range(head_dim):
                score += query[d] * key[d]
            scores[h, i] = score * scale
        i += 1
    totals = _exp_weights_of_heads(scores, softcap, maxes)
    _prefetch_rows(v_rows, row_ids, 0, PREFETCH_KEYS_AHEAD)
    i = 0
    while i + KEYS_AT_ONCE <= num_keys:
        _prefetch_rows(v_rows, row_ids, i + PREFETCH_KEYS_AHEAD, i + PREFETCH_KEYS_AHEAD + KEYS_AT_ONCE)
        v0 = kv_row(v_cache, kv_type, blocks[i], offsets[i], kv_head, rows[0])
        v1 = kv_row(v_cache, kv_type, blocks[i + 1], offsets[i + 1], kv_head, rows[1])
        v2 = kv_row(v_cache, kv_type, blocks[i + 2], offsets[i + 2], kv_head, rows[2])
        v3 = kv_row(v_cache, kv_type, blocks[i + 3], offsets[i + 3], kv_head, rows[3])
        for h in range(num_heads):
            head_scores, head_acc = scores[h], acc[h]
            w0, w1, w2, w3 = head_scores[i], head_scores[i + 1], head_scores[i + 2], head_scores[i + 3]
            for d in range(head_dim):
                head_acc[d] += w0 * v0[d] + w1 * v1[d] + w2 * v2[d] + w3 * v3[d]
        i += KEYS_AT_ONCE
    while i < num_keys:
        value = kv_row(v_cache, kv_type, blocks[i], offsets[i], kv_head, rows[0])
        for h in range(num_heads):
            weight, head_acc = scores[h, i], acc[h]
            for d in range(head_dim):
                head_acc[d] += weight * value[d]
        i += 1
    return totals


@njit(cache=True, fastmath=SUM_FASTMATH)
def _attend_vector_rows(queries, k_rows, v_rows, row_ids, scale, softcap, scores, acc, maxes):
    """attend_heads_unnormalised over an f16 or f32 cache (k_rows, v_rows: _rows of the caches) with head_dim a
    multiple of 8, through the vector loops of ir/kv_rows.py, key-major (a group of keys' rows stays in L1 for every
    head) and prefetched two groups ahead: at head_dim 64, 3 heads a kv head, one thread, AVX2 tier, 2.1-2.5x fewer
    ns a (head, key) over an f16 cache than the numba loops (f32 1.1-1.4x). acc: zeros on entry."""
    num_heads = queries.shape[0]
    num_keys = row_ids.size
    _prefetch_rows(k_rows, row_ids, 0, 2 * KEYS_A_GROUP)
    for first in range(0, num_keys, KEYS_A_GROUP):  # key-major: a group's rows stay in L1 for every head
        count = min(KEYS_A_GROUP, num_keys - first)
        _prefetch_rows(k_rows, row_ids, first + 2 * KEYS_A_GROUP, first + 3 * KEYS_A_GROUP)
        for h in range(num_heads):
            key_scores_into(queries, h, k_rows, row_ids, first, count, scale, scores)
    totals = _exp_weights_of_heads(scores, softcap, maxes)
    _prefetch_rows(v_rows, row_ids, 0, VALUE_KEYS)
    for first in range(0, num_keys, VALUE_KEYS):
        count = min(VALUE_KEYS, num_keys - first)
        _prefetch_rows(v_rows, row_ids, first + VALUE_KEYS, first + 2 * VALUE_KEYS)
        for h in range(num_heads):
            add_value_rows(scores, h, v_rows, row_ids, first, count, acc)
    return totals


@njit(cache=True, inline="always")
def _rows(cache):
    """A cache [blocks, block_size, kv_heads, head_dim] as rows: row (block * block_size + offset) * kv_heads +
    kv_head."""
    return cache.reshape(cache.shape[0] * cache.shape[1] * cache.shape[2], cache.shape[3])


@njit(cache=True, inline="always")
def _key_places(block_table, block_size, num_kv_heads, kv_head, first_key, num_keys):
    """Where key positions first_key.. (num_keys of them) lie: their cache blocks, offsets in the block, and kv head
    kv_head's row in _rows, stepping through the block table (no integer division a key: with a 64-bit idiv or two
    per row read and prefetch, the divisions cost about as much as the rows' dots)."""
    blocks = np.empty(num_keys, dtype=np.int64)
    offsets = np.empty(num_keys, dtype=np.int64)
    row_ids = np.empty(num_keys, dtype=np.int64)
    table_index, offset = first_key // block_size, first_key % block_size
    for i in range(num_keys):
        blocks[i], offsets[i] = block_table[table_index], offset
        row_ids[i] = (blocks[i] * block_size + offset) * num_kv_heads + kv_head
        offset += 1
        if offset == block_size:
            table_index, offset = table_index + 1, 0
    return blocks, offsets, row_ids


@njit(cache=True, inline="always")
def _prefetch_rows(rows, row_ids, first, stop):
    """Prefetch rows row_ids[first:stop] (clipped to the keys there are): a sequence's rows lie in scattered
    blocks, out of the hardware prefetcher's view."""
    for i in range(first, min(stop, row_ids.size)):
        for column in range(0, rows.shape[1], CACHE_LINE_BYTES // rows.itemsize):
            prefetch_byte(rows, row_ids[i], column)


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def _exp_weights_of_heads(scores, softcap, maxes):
    """_exp_weights_in_place of every head's scores [heads, keys]: their totals [heads]; maxes[h] the head's
    highest score (after soft-capping)."""
    totals = np.empty(scores.shape[0], dtype=np.float32)
    for h in range(scores.shape[0]):
        totals[h], maxes[h] = _exp_weights_in_place(scores[h], softcap)
    return totals


@njit(cache=True, inline="always")
def _normalised_into(acc, totals, out):
    """out[h] = acc[h] / totals[h] (the weighted value sums divided by their weights' total once, at the end)."""
    for h in range(acc.shape[0]):  # element loops, not out[:, :] = acc: see kv_store.store_kv_into
        total = totals[h]
        for d in range(acc.shape[1]):
            out[h, d] = acc[h, d] / total


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def _exp_weights_in_place(scores, softcap):
    """scores -> exp(score - max) (soft-capped first where softcap > 0); returns (their sum, max). All in float32: a
    float64 start for the max (-np.inf) made every exponent float64, so exp_f32 ran in 4-lane double vectors (f16
    cache, 3 heads, 1 thread, AVX2 tier, in-process A/B: 42 keys 5.21 -> 5.01 us, 500 keys 30.27 -> 28.56 us;
    outputs within 9e-8)."""
    best = np.float32(-np.inf)
    for i in range(scores.size):
        if softcap > 0:
            scores[i] = softcap * np.float32(math.tanh(scores[i] / softcap))
        best = max(best, scores[i])
    total = np.float32(0.0)
    for i in range(scores.size):  # max-subtracted softmax: every exponent is <= 0; exp_f32 vectorises, libm's did not
        scores[i] = exp_f32(scores[i] - best)
        total += scores[i]
    return total, best


@njit(cache=True, nogil=True)
def heads_per_task(num_spans, num_heads, num_kv_heads, threads):
    """Query heads a task takes: all of a kv head's (they share its K/V reads), halved while there would be fewer
    tasks than threads (a lone decode token still uses every thread). num_spans: the tokens' key spans (one a
    token below SPLIT_KEYS keys), counted."""
    per_task = num_heads // num_kv_heads
    while per_task % 2 == 0 and num_spans * (num_heads // per_task) < threads:
        per_task //= 2
    return per_task


@njit(cache=True, inline="always")
def key_splits(num_keys):
    """Spans a query's num_keys visible keys are split into (a function of their count alone: a token's bits do not
    depend on its batch or the thread count)."""
    return max(1, (num_keys + SPLIT_KEYS - 1) // SPLIT_KEYS)


@njit(cache=True, inline="always")
def split_span(first_key, last_key, split, splits):
    """(first, last) key positions of split `split` of `splits` near-equal spans of first_key..last_key (empty
    where first > last: only past ~SPLIT_KEYS**2 keys)."""
    per_split = (last_key - first_key + splits) // splits
    first = first_key + split * per_split
    return first, min(last_key, first + per_split - 1)


@njit(cache=True, inline="always")
def _query_keys(context_lens, query_start_loc, token_seq, sliding_window, t):
    """(sequence, first and last key position) query token t sees: a sequence's queries are its last tokens."""
    seq = token_seq[t]
    num_queries = query_start_loc[seq + 1] - query_start_loc[seq]
    query_pos = context_lens[seq] - num_queries + (t - query_start_loc[seq])
    return seq, first_visible_key(query_pos, sliding_window), query_pos


@njit(cache=True)
def attend_tokens(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq, scale,
                  sliding_window, softcap, out, first_token, stop_token, threads, tasks_kernel):
    """Attention of query tokens first_token..stop_token-1 (token t of sequence token_seq[t], whose queries are its
    last tokens: query_start_loc, context_lens) on `threads` threads (1: this one alone). A task is (token, run of
    heads of one kv head, span of keys): a token with more than SPLIT_KEYS visible keys is split into spans whose
    unnormalised sums are merged afterwards (_merge_splits), so a lone decode token at a long context keeps every
    thread busy (SmolLM2's 3 kv heads: 3 tasks for 2 threads without), each thread reading only its span.
    tasks_kernel: attend_tasks_kernel's handle of attend_tasks for these arguments, called through its address
    (ir/native_call.py), so the attention loops are not optimised again inside this glue and every caller above
    it (the decode layer's first-run compile ~3 s shorter)."""
    per_task, splits, parts, part_maxes, part_totals, num_tasks = _task_plan(
        q, k_cache, context_lens, query_start_loc, token_seq, sliding_window, first_token, stop_token, threads)
    if threads > 1:
        attend_tasks_parallel(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq,
                              scale, sliding_window, softcap, out, np.int64(first_token), per_task, splits, parts,
                              part_maxes, part_totals, num_tasks,
                              np.int64(max(1, min(num_tasks, CHUNKS_PER_THREAD * threads))), tasks_kernel)
    else:
        call_native(handle_at(tasks_kernel, 0), (q, k_cache, v_cache, kv_type, block_tables, context_lens,
                                                 query_start_loc, token_seq, scale, sliding_window, softcap, out,
                                                 np.int64(first_token), per_task, splits, parts, part_maxes,
                                                 part_totals, np.int64(0), num_tasks))
    if splits > 1:
        _merge_splits(context_lens, query_start_loc, token_seq, sliding_window, np.int64(first_token), parts,
                      part_maxes, part_totals, out)


# attend_tasks' arguments after attend_tokens' first twelve: first token, heads a task, spans, the spans' sums,
# maxima and totals (_task_plan), first and stop task
_TASK_ARG_TYPES = (types.int64, types.int64, types.int64, types.Array(types.float32, 4, "C"),
                   types.Array(types.float32, 3, "C"), types.Array(types.float32, 3, "C"), types.int64, types.int64)


def attend_tasks_kernel(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq,
                        scale, sliding_window, softcap, out) -> np.ndarray:
    """The handle (native_call.handles_array, one row) of attend_tasks compiled (or loaded from numba's cache) for
    attend_tokens called with these first twelve arguments: the values, or their numba types. Looked up by the
    values' type fingerprints (numba's dispatcher keys its own type cache by them: ~0.2 us a value, where
    numba.typeof took ~5), so a call on the hot path (paged_attention, the decode layer) costs a few us."""
    values = (q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq, scale,
              sliding_window, softcap, out)
    try:
        key = tuple(value if isinstance(value, types.Type) else compute_fingerprint(value) for value in values)
    except (TypeError, ValueError):  # a value numba fingerprints no type for: typed the slow way, not kept
        return _tasks_kernel(_arg_types(values))
    handles = _TASKS_KERNELS.get(key)
    if handles is None:
        handles = _TASKS_KERNELS[key] = _tasks_kernel(_arg_types(values))
    return handles


_TASKS_KERNELS: dict = {}  # type fingerprints of attend_tasks_kernel's values -> handles


def _arg_types(values: tuple) -> tuple:
    return tuple(value if isinstance(value, types.Type) else numba.typeof(value) for value in values) + \
        _TASK_ARG_TYPES


@functools.cache
def _tasks_kernel(arg_types: tuple) -> np.ndarray:
    return handles_array([native_kernel(attend_tasks, arg_types)])


def attend_tokens_serial(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq,
                         scale, sliding_window, softcap, out, first_token: int, stop_token: int) -> None:
    """attend_tokens on this thread alone, from Python: the same tasks and bits through the same compiled parts,
    and no parallel region to compile (a first run's short prompts need only these before their first token)."""
    per_task, splits, parts, part_maxes, part_totals, num_tasks = _task_plan(
        q, k_cache, context_lens, query_start_loc, token_seq, sliding_window, first_token, stop_token, 1)
    attend_tasks(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq, scale,
                 sliding_window, softcap, out, first_token, per_task, splits, parts, part_maxes, part_totals, 0,
                 num_tasks)
    if splits > 1:
        _merge_splits(context_lens, query_start_loc, token_seq, sliding_window, first_token, parts, part_maxes,
                      part_totals, out)


@njit(cache=True)
def _task_plan(q, k_cache, context_lens, query_start_loc, token_seq, sliding_window, first_token, stop_token,
               threads):
    """(heads a task, key spans a token, the spans' sums, maxima and totals (none where no token is split), the
    task count) of attend_tokens. Counts are plain int64 (np.int64): a literal (a caller's 0, splits' 1) would
    compile another copy of the task loops, which a cache recorded from other calls (the binary's tiers) lacks."""
    num_tokens, num_heads = stop_token - first_token, q.shape[1]
    splits = 1
    for t in range(first_token, stop_token):
        _, first_key, last_key = _query_keys(context_lens, query_start_loc, token_seq, sliding_window, t)
        splits = max(splits, key_splits(last_key - first_key + 1))
    per_task = heads_per_task(num_tokens * splits, num_heads, k_cache.shape[2], threads)
    parts = np.empty((num_tokens if splits > 1 else 0, splits, num_heads, q.shape[2]), dtype=np.float32)
    part_maxes = np.empty((parts.shape[0], splits, num_heads), dtype=np.float32)
    part_totals = np.empty((parts.shape[0], splits, num_heads), dtype=np.float32)
    num_tasks = num_tokens * (num_heads // per_task) * splits
    return np.int64(per_task), np.int64(splits), parts, part_maxes, part_totals, np.int64(num_tasks)


@njit(cache=True, nogil=True)
def attend_tasks(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq, scale,
                 sliding_window, softcap, out, first_token, per_task, splits, parts, part_maxes, part_totals,
                 first_task, stop_task):
    """Tasks first_task..stop_task-1 of attend_tokens, task = (token first_token + i, run of per_task heads, span)
    flattened as (i * (heads / per_task) + run) * splits + span; per_task divides the heads of a kv head
    (heads_per_task). A token of one span writes out; a split one its span's parts (a span past its own count:
    nothing)."""
    num_heads = q.shape[1]
    group_size = num_heads // k_cache.shape[2]
    runs_per_token = num_heads // per_task
    for task in range(first_task, stop_task):
        token_run, span = task // splits, task % splits
        i, first_head = token_run // runs_per_token, (token_run % runs_per_token) * per_task
        t = first_token + i
        seq, first_key, last_key = _query_keys(context_lens, query_start_loc, token_seq, sliding_window, t)
        token_splits = key_splits(last_key - first_key + 1)
        stop_head = first_head + per_task
        if token_splits == 1:
            if span == 0:
                attend_heads(q[t, first_head:stop_head], k_cache, v_cache, kv_type, block_tables[seq],
                             first_head // group_size, first_key, last_key, scale, softcap,
                             out[t, first_head:stop_head])
        elif span < token_splits:
            span_first, span_last = split_span(first_key, last_key, span, token_splits)
            if span_first <= span_last:
                totals = attend_heads_unnormalised(
                    q[t, first_head:stop_head], k_cache, v_cache, kv_type, block_tables[seq], first_head // group_size,
                    span_first, span_last, scale, softcap, parts[i, span, first_head:stop_head],
                    part_maxes[i, span, first_head:stop_head])
                for h in range(first_head, stop_head):  # element loop: see attend_heads_unnormalised
                    part_totals[i, span, h] = totals[h - first_head]


@njit(cache=True, nogil=True, parallel=True)
def attend_tasks_parallel(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq,
                          scale, sliding_window, softcap, out, first_token, per_task, splits, parts, part_maxes,
                          part_totals, num_tasks, chunks, tasks_kernel):
    """attend_tasks 0..num_tasks-1 (through tasks_kernel, attend_tasks_kernel's handle) in `chunks` spans of tasks,
    every iteration taking the next span from a shared counter until none is left (ir/atomic_counter.py: a thread
    that loses its core leaves its spans to the others, its own later iterations find none; each task writes only
    its own heads, so the bits do not depend on who takes it). The iterations, not the pool's threads:
    pool_threads' declaration clashes with the parallel loop's own."""
    tasks_per_chunk = (num_tasks + chunks - 1) // chunks
    counter = new_counter()
    for worker in prange(chunks):
        chunk = claim_next(counter)
        while chunk < chunks:
            first = chunk * tasks_per_chunk
            call_native(handle_at(tasks_kernel, 0), (q, k_cache, v_cache, kv_type, block_tables, context_lens,
                                                     query_start_loc, token_seq, scale, sliding_window, softcap, out,
                                                     first_token, per_task, splits, parts, part_maxes, part_totals,
                                                     first, min(num_tasks, first + tasks_per_chunk)))
            chunk = claim_next(counter)


@njit(cache=True)
def _merge_splits(context_lens, query_start_loc, token_seq, sliding_window, first_token, parts, part_maxes,
                  part_totals, out):
    """out[t, h] of each split token first_token + i: its spans' sums rescaled to their common maximum, over the
    rescaled totals (in span order: the same bits whatever the batch)."""
    num_heads, head_dim = parts.shape[2], parts.shape[3]
    for i in range(parts.shape[0]):
        t = first_token + i
        _, first_key, last_key = _query_keys(context_lens, query_start_loc, token_seq, sliding_window, t)
        token_splits = key_splits(last_key - first_key + 1)
        if token_splits == 1:
            continue
        for h in range(num_heads):
            best = np.float32(-np.inf)
            for span in range(token_splits):
                span_first, span_last = split_span(first_key, last_key, span, token_splits)
                if span_first <= span_last:
                    best = max(best, part_maxes[i, span, h])
            total = np.float32(0.0)
            for d in range(head_dim):
                out[t, h, d] = 0.0
            for span in range(token_splits):
                span_first, span_last = split_span(first_key, last_key, span, token_splits)
                if span_first > span_last:
                    continue
                weight = exp_f32(part_maxes[i, span, h] - best)
                total += weight * part_totals[i, span, h]
                for d in range(head_dim):
                    out[t, h, d] += weight * parts[i, span, h, d]
            for d in range(head_dim):
                out[t, h, d] /= total


def _attention_work(context_lens, query_start_loc, num_heads: int, head_dim: int, sliding_window: int) -> int:
    """Rough count of q.k and p.v terms, to decide whether threads pay off."""
    num_queries = np.diff(query_start_loc).astype(np.int64)
    keys_seen = np.asarray(context_lens, dtype=np.int64)
    if sliding_window > 0:
        keys_seen = np.minimum(keys_seen, sliding_window)
    return int((num_queries * keys_seen).sum()) * num_heads * head_dim * 2


def _check_layout(q, k_cache, v_cache, block_tables, context_lens, query_start_loc) -> None:
    num_tokens, num_heads, head_dim = q.shape
    if k_cache.shape != v_cache.shape or k_cache.ndim != 4 or k_cache.shape[3] != cache_row_shape(k_cache, head_dim)[1]:
        raise ValueError(f"paged_attention: caches {k_cache.shape}/{v_cache.shape} do not fit q {q.shape}")
    if num_heads % k_cache.shape[2]:
        raise ValueError(f"paged_attention: {num_heads} heads not a multiple of {k_cache.shape[2]} kv heads")
    if query_start_loc.size != context_lens.size + 1 or query_start_loc[-1] != num_tokens:
        raise ValueError("paged_attention: query_start_loc must have num_seqs+1 entries ending at num_tokens")
    num_queries = np.diff(query_start_loc)
    if np.any(num_queries < 0) or np.any(num_queries > context_lens):
        raise ValueError("paged_attention: each sequence needs 0 <= its query count <= its context length")
    if np.any(context_lens > block_tables.shape[1] * k_cache.shape[1]):
        raise ValueError("paged_attention: a context length exceeds its block table")


def paged_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray,
                    context_lens: np.ndarray, query_start_loc: np.ndarray, scale: float,
                    sliding_window: int = 0, softcap: float = 0.0, out: np.ndarray | None = None) -> np.ndarray:
    """Attention of q: [n, heads, head_dim] over the paged cache [blocks, block_size, kv_heads, head_dim].

    Sequence s owns queries q[query_start_loc[s]:query_start_loc[s+1]], the last tokens of its
    context_lens[s] cached tokens. sliding_window 0 = full causal attention; softcap 0 = no capping.
    """
    q = np.ascontiguousarray(q, dtype=np.float32)
    block_tables = np.ascontiguousarray(block_tables, dtype=np.int32)
    context_lens = np.ascontiguousarray(context_lens, dtype=np.int32)
    query_start_loc = np.ascontiguousarray(query_start_loc, dtype=np.int32)
    _check_layout(q, k_cache, v_cache, block_tables, context_lens, query_start_loc)
    if out is None:
        out = np.empty_like(q)
    token_seq = sequence_of_tokens(query_start_loc, q.shape[0])
    args = (q, k_cache, v_cache, kv_type_of(k_cache), block_tables, context_lens, query_start_loc, token_seq,
            np.float32(scale), int(sliding_window), np.float32(softcap), out)
    num_queries = np.diff(query_start_loc)
    if num_queries.size and num_queries.max() >= MIN_BLOCKED_QUERIES:
        _attention_by_sequence(args, num_queries)
        return out
    if use_threads(_attention_work(context_lens, query_start_loc, q.shape[1], q.shape[2], sliding_window)):
        attend_tokens(*args, 0, q.shape[0], numba.get_num_threads(), attend_tasks_kernel(*args))
    else:
        attend_tokens_serial(*args, 0, q.shape[0])
    return out


def _attention_by_sequence(args: tuple, num_queries: np.ndarray) -> None:
    """Prompt chunks through GEMM tiles, the other sequences (decodes, short verifies) through
    attend_tokens_serial."""
    q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, _, scale, sliding_window, softcap, out = args
    for seq, count in enumerate(num_queries):
        first, stop = int(query_start_loc[seq]), int(query_start_loc[seq + 1])
        if count >= MIN_BLOCKED_QUERIES:
            attend_sequence(q[first:stop], k_cache, v_cache, kv_type, block_tables[seq], int(context_lens[seq]),
                            float(scale), sliding_window, float(softcap), out[first:stop])
        elif count:
            attend_tokens_serial(*args, first, stop)
