import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba.kv_type import KV_TYPES, make_kv_layer

cpu, reference = get_ops("cpu"), get_ops("reference")
BACKENDS = ("reference", "cpu")


def make_paged_batch(rng, context_lens, query_lens, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4,
                     kv_type="f32"):
    """Random keys/values for whole sequences stored through store_kv into shuffled blocks (caches of KV type
    kv_type), plus queries."""
    blocks_per_seq = [-(-n // block_size) for n in context_lens]
    block_ids = rng.permutation(sum(blocks_per_seq) + 3)  # spare blocks stay unused
    block_tables = np.full((len(context_lens), max(blocks_per_seq)), -1, np.int32)
    start = 0
    for s, count in enumerate(blocks_per_seq):
        block_tables[s, :count] = block_ids[start:start + count]
        start += count
    k_cache, v_cache = (make_kv_layer(len(block_ids), block_size, num_kv_heads, head_dim, KV_TYPES[kv_type])
                        for _ in range(2))
    for s, num_tokens in enumerate(context_lens):
        positions = np.arange(num_tokens)
        slots = block_tables[s, positions // block_size].astype(np.int64) * block_size + positions % block_size
        keys = rng.standard_normal((num_tokens, num_kv_heads, head_dim)).astype(np.float32)
        values = rng.standard_normal((num_tokens, num_kv_heads, head_dim)).astype(np.float32)
        cpu.store_kv(keys, values, k_cache, v_cache, slots)
    query_start_loc = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    q = rng.standard_normal((int(query_start_loc[-1]), num_heads, head_dim)).astype(np.float32)
    return q, k_cache, v_cache, block_tables, np.array(context_lens, np.int32), query_start_loc


def dense_attention(q, keys, values, query_positions, scale, visible):
    """Plain attention of one sequence: q [nq, H, D], keys/values [ctx, KVH, D], visible(qpos, kpos)."""
    group = q.shape[1] // keys.shape[1]
    out = np.zeros(q.shape)
    for i, pos in enumerate(query_positions):
        for h in range(q.shape[1]):
            scores = keys[:, h // group] @ q[i, h] * scale
            mask = np.array([visible(pos, k) for k in range(len(keys))])
            weights = np.exp(scores - scores[mask].max()) * mask
            out[i, h] = weights @ values[:, h // group] / weights.sum()
    return out


@pytest.mark.parametrize("sliding_window", [0, 3])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_paged_attention_cpu_matches_reference_on_a_mixed_batch(sliding_window, softcap, threading_mode):
    rng = np.random.default_rng(sliding_window * 10 + int(softcap))
    # a prefill of a fresh sequence, a chunked prefill, two decodes, and a sequence with no queries this step
    batch = make_paged_batch(rng, context_lens=[7, 13, 9, 1, 5], query_lens=[7, 5, 1, 1, 0])
    args = (*batch, 0.125, sliding_window, softcap)
    expected = reference.paged_attention(*args)
    got = cpu.paged_attention(*args)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sliding_window", [0, 1, 2, 5])
def test_paged_attention_is_causal_with_llama_cpp_sliding_window(backend, sliding_window):
    rng = np.random.default_rng(1)
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc = make_paged_batch(
        rng, context_lens=[6], query_lens=[4], num_heads=2, num_kv_heads=1, head_dim=8, block_size=2)
    positions = np.arange(6)
    keys = k_cache[block_tables[0, positions // 2], positions % 2]
    values = v_cache[block_tables[0, positions // 2], positions % 2]

    def visible(query_pos, key_pos):  # llama.cpp is_masked_swa: masked when query_pos - key_pos >= n_swa
        return key_pos <= query_pos and (sliding_window == 0 or query_pos - key_pos < sliding_window)

    expected = dense_attention(q, keys, values, [2, 3, 4, 5], 0.3, visible)
    got = get_ops(backend).paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_start_loc,
                                           0.3, sliding_window, 0.0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_window_of_one_sees_only_itself():
    rng = np.random.default_rng(2)
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc = make_paged_batch(
        rng, context_lens=[5], query_lens=[1], num_heads=1, num_kv_heads=1, head_dim=4, block_size=2)
    got = cpu.paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, 1.0, 1, 0.0)
    np.testing.assert_allclose(got[0, 0], v_cache[block_tables[0, 2], 0, 0], rtol=1e-6)


def test_softmax_is_stable_for_huge_scores():
    rng = np.random.default_rng(3)
    batch = make_paged_batch(rng, context_lens=[8], query_lens=[2])
    got = cpu.paged_attention(*batch, 1e4, 0, 0.0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, reference.paged_attention(*batch, 1e4, 0, 0.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_store_kv_writes_slots_and_skips_padding(backend):
    k = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    v = -k
    k_cache, v_cache = np.zeros((3, 2, 2, 4), np.float32), np.zeros((3, 2, 2, 4), np.float32)
    get_ops(backend).store_kv(k, v, k_cache, v_cache, np.array([5, -1, 0]))
    np.testing.assert_array_equal(k_cache[2, 1], k[0])
    np.testing.assert_array_equal(v_cache[2, 1], v[0])
    np.testing.assert_array_equal(k_cache[0, 0], k[2])
    assert np.count_nonzero(k_cache) == np.count_nonzero(k[0]) + np.count_nonzero(k[2])


def test_paged_attention_rejects_inconsistent_metadata():
    rng = np.random.default_rng(4)
    q, k_cache, v_cache, block_tables, context_lens, _ = make_paged_batch(rng, context_lens=[4], query_lens=[2])
    with pytest.raises(ValueError, match="query_start_loc"):
        cpu.paged_attention(q, k_cache, v_cache, block_tables, context_lens, np.array([0, 1], np.int32), 1.0)


def test_heads_per_task_keeps_a_kv_heads_group_unless_threads_would_idle():
    from kernels_numba.cpu.attention import heads_per_task
    assert heads_per_task(8, 4, 1, 2) == 4  # 8 tasks of a kv head's 4 heads for 2 threads
    assert heads_per_task(1, 4, 1, 2) == 2  # one decode token: 2 tasks of 2 heads, one a thread
    assert heads_per_task(1, 4, 1, 1) == 4
    assert heads_per_task(1, 8, 2, 2) == 4  # 2 kv heads already give 2 tasks
    assert heads_per_task(1, 6, 2, 4) == 3  # an odd group is not split


@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_a_heads_result_is_the_same_bits_however_heads_are_grouped_into_tasks(softcap):
    """Grouping a kv head's query heads into one task (they share its K/V reads) must not change any head's bits:
    a token decodes alike alone (heads split for threads) and in a batch (whole groups)."""
    from kernels_numba.cpu.attention import attend_tasks, sequence_of_tokens
    rng = np.random.default_rng(5)
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc = make_paged_batch(
        rng, context_lens=[23, 9, 14], query_lens=[1, 1, 2], num_heads=8, num_kv_heads=2)
    token_seq = sequence_of_tokens(query_start_loc, q.shape[0])
    no_parts = np.empty((0, 1, 8, q.shape[2]), np.float32), np.empty((0, 1, 8), np.float32)
    outs = []
    for per_task in (4, 2, 1):
        out = np.empty_like(q)
        attend_tasks(q, k_cache, v_cache, 0, block_tables, context_lens, query_start_loc, token_seq,
                     np.float32(0.125), 0, np.float32(softcap), out, 0, per_task, 1, no_parts[0], no_parts[1],
                     no_parts[1], 0, q.shape[0] * (8 // per_task))
        outs.append(out)
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    expected = reference.paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, 0.125,
                                         0, softcap)
    np.testing.assert_allclose(outs[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_keys", [1, 511, 512, 513, 1024, 1025, 2000, 70_001])
def test_key_spans_cover_a_querys_keys_in_order(num_keys):
    from kernels_numba.cpu.attention import SPLIT_KEYS, key_splits, split_span
    splits = key_splits(num_keys)
    assert (splits == 1) == (num_keys <= SPLIT_KEYS) and splits == -(-num_keys // SPLIT_KEYS)
    first_key = 37
    spans = [split_span(first_key, first_key + num_keys - 1, span, splits) for span in range(splits)]
    assert spans[0][0] == first_key and spans[-1][1] == first_key + num_keys - 1
    assert all(last >= first for first, last in spans)  # none empty
    assert all(spans[i + 1][0] == spans[i][1] + 1 for i in range(splits - 1))  # contiguous
    sizes = [last - first + 1 for first, last in spans]
    assert max(sizes) - min(sizes) <= splits  # near-equal: each thread's share alike


def _attend_tokens(batch, threads, softcap=0.0, sliding_window=0):
    from kernels_numba.cpu.attention import attend_tasks_kernel, attend_tokens, sequence_of_tokens
    from kernels_numba.kv_type import kv_type_of
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc = batch
    out = np.full_like(q, np.nan)
    args = (q, k_cache, v_cache, kv_type_of(k_cache), block_tables, context_lens, query_start_loc,
            sequence_of_tokens(query_start_loc, q.shape[0]), np.float32(0.1), sliding_window, np.float32(softcap), out)
    attend_tokens(*args, 0, q.shape[0], threads, attend_tasks_kernel(*args))
    return out


@pytest.mark.parametrize("kv_type, head_dim", [("f16", 64), ("f32", 64), ("q8_0", 32)])
@pytest.mark.parametrize("softcap, sliding_window", [(0.0, 0), (5.0, 0), (0.0, 700)])
def test_a_long_context_token_split_into_key_spans_matches_the_reference(kv_type, head_dim, softcap,
                                                                          sliding_window, threading_mode):
    """Past SPLIT_KEYS visible keys a query's keys go in spans (tasks of their own) merged afterwards: the vector
    rows (f16/f32) and the numba loops (q8_0), with soft-capping and a window that leaves 700 keys (2 spans)."""
    rng = np.random.default_rng(len(kv_type) + head_dim + int(softcap) + sliding_window)
    batch = make_paged_batch(rng, [1300, 40, 1030], [1, 1, 2], num_heads=6, num_kv_heads=2, head_dim=head_dim,
                             block_size=16, kv_type=kv_type)
    expected = reference.paged_attention(*batch, 0.1, sliding_window, softcap)
    got = cpu.paged_attention(*batch, 0.1, sliding_window, softcap)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_split_token_gets_the_same_bits_alone_batched_and_on_any_thread_count():
    rng = np.random.default_rng(11)
    batch = make_paged_batch(rng, [900, 30, 2100], [1, 1, 1], num_heads=9, num_kv_heads=3, head_dim=64,
                             block_size=16, kv_type="f16")
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc = batch
    serial, pooled = _attend_tokens(batch, 1), _attend_tokens(batch, 2)
    assert np.array_equal(serial, pooled) and not np.isnan(serial).any()
    for seq in (0, 2):
        alone = (q[seq:seq + 1], k_cache, v_cache, block_tables[seq:seq + 1], context_lens[seq:seq + 1],
                 np.array([0, 1], np.int32))
        assert np.array_equal(_attend_tokens(alone, 2)[0], serial[seq])
