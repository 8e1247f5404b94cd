"""The vector loops of decode attention (kernels_numba/cpu/ir/kv_rows.py) against numpy, and decode attention
through them against the reference at head sizes with whole 64-dim slabs, a rest, or both."""
import numpy as np
import pytest
from numba import njit

from kernels_numba import get_ops
from kernels_numba.cpu.ir.kv_rows import add_value_rows, key_scores_into
from tests.kernels.test_kernel_attention import make_paged_batch

cpu, reference = get_ops("cpu"), get_ops("reference")


@njit(cache=False)
def _scores(queries, rows, row_ids, scale, scores):
    for h in range(queries.shape[0]):
        for first in range(0, row_ids.size, 8):
            key_scores_into(queries, h, rows, row_ids, first, min(8, row_ids.size - first), scale, scores)


@njit(cache=False)
def _values(weights, rows, row_ids, first, count, acc):
    for h in range(weights.shape[0]):
        add_value_rows(weights, h, rows, row_ids, first, count, acc)


def _rows(rng, num_rows, head_dim, is_half):
    values = rng.standard_normal((num_rows, head_dim)).astype(np.float16 if is_half else np.float32)
    stored = values.view(np.uint8) if is_half else values
    return np.ascontiguousarray(stored), values.astype(np.float32)


@pytest.mark.parametrize("is_half", [True, False])
@pytest.mark.parametrize("head_dim", [8, 64, 72, 256])
@pytest.mark.parametrize("num_keys", [1, 7, 8, 13])
def test_key_scores_match_numpy(is_half, head_dim, num_keys):
    rng = np.random.default_rng(head_dim + num_keys)
    rows, values = _rows(rng, 40, head_dim, is_half)
    row_ids = rng.permutation(40)[:num_keys].astype(np.int64)
    queries = rng.standard_normal((3, head_dim)).astype(np.float32)
    scores = np.full((3, num_keys + 2), 7.0, np.float32)  # the two past num_keys stay as they were
    _scores(queries, rows, row_ids, np.float32(0.125), scores)
    expected = 0.125 * queries.astype(np.float64) @ values[row_ids].T.astype(np.float64)
    np.testing.assert_allclose(scores[:, :num_keys], expected, rtol=1e-5, atol=1e-5)
    assert np.all(scores[:, num_keys:] == 7.0)


@pytest.mark.parametrize("is_half", [True, False])
@pytest.mark.parametrize("head_dim", [8, 64, 72, 256])
def test_value_rows_add_the_weighted_rows(is_half, head_dim):
    rng = np.random.default_rng(head_dim)
    rows, values = _rows(rng, 50, head_dim, is_half)
    row_ids = rng.permutation(50)[:21].astype(np.int64)
    weights = rng.random((3, 21)).astype(np.float32)
    acc = rng.standard_normal((3, head_dim)).astype(np.float32)
    expected = acc.astype(np.float64) + weights[:, 5:17].astype(np.float64) @ values[row_ids[5:17]]
    _values(weights, rows, row_ids, 5, 12, acc)
    np.testing.assert_allclose(acc, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
@pytest.mark.parametrize("head_dim", [64, 72, 128])
def test_decode_attention_through_the_vector_rows_matches_the_reference(kv_type, head_dim, threading_mode):
    rng = np.random.default_rng(head_dim)
    batch = make_paged_batch(rng, [5, 40, 17], [1, 1, 1], num_heads=6, num_kv_heads=2, head_dim=head_dim,
                             block_size=16, kv_type=kv_type)
    np.testing.assert_allclose(cpu.paged_attention(*batch, 0.1), reference.paged_attention(*batch, 0.1),
                               rtol=1e-5, atol=1e-5)


def test_a_token_gets_the_same_bits_alone_and_in_a_batch():
    rng = np.random.default_rng(3)
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc = make_paged_batch(
        rng, [30, 70, 9], [1, 1, 1], num_heads=6, num_kv_heads=2, head_dim=64, block_size=16, kv_type="f16")
    together = cpu.paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, 0.1)
    alone = cpu.paged_attention(q[1:2], k_cache, v_cache, block_tables[1:2], context_lens[1:2],
                                np.array([0, 1], np.int32), 0.1)
    assert np.array_equal(alone[0], together[1])
