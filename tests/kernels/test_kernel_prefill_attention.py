"""The GEMM-tiled prompt attention (prefill_attention.py) against the numpy oracle.

Tiny tiles (2-3 tokens per query block, one or two cache blocks per key chunk) make tiny prompts cross every
boundary: several query blocks, several key chunks with an online-softmax rescale, chunks fully visible, chunks
cut by the causal edge or the sliding window, and rows that see no key of a chunk at all.
"""
import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba.cpu import attention, prefill_attention
from tests.kernels.test_kernel_attention import make_paged_batch

cpu, reference = get_ops("cpu"), get_ops("reference")


@pytest.fixture
def tiny_tiles(monkeypatch):
    monkeypatch.setattr(prefill_attention, "QUERY_BLOCK_TOKENS", 3)
    monkeypatch.setattr(prefill_attention, "KEY_CHUNK_TOKENS", 4)
    monkeypatch.setattr(attention, "MIN_BLOCKED_QUERIES", 4)


@pytest.mark.parametrize("sliding_window", [0, 1, 3, 6])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_tiled_prompt_attention_matches_reference(tiny_tiles, blas_path, threading_mode, sliding_window, softcap):
    rng = np.random.default_rng(sliding_window + int(softcap))
    # a fresh prompt, a later prompt chunk, a decode and a 2-token verify beside them, an idle sequence
    batch = make_paged_batch(rng, context_lens=[11, 17, 9, 6, 3], query_lens=[11, 7, 1, 2, 0], block_size=2)
    args = (*batch, 0.3, sliding_window, softcap)
    np.testing.assert_allclose(cpu.paged_attention(*args), reference.paged_attention(*args), rtol=1e-5, atol=1e-5)


def test_tiled_path_is_taken_and_agrees_with_the_per_token_kernel(monkeypatch, blas_path):
    rng = np.random.default_rng(7)
    batch = make_paged_batch(rng, context_lens=[40], query_lens=[33], num_heads=4, num_kv_heads=1, block_size=4)
    tiled = cpu.paged_attention(*batch, 0.2, 8, 0.0)  # 33 queries: the tiled path
    calls = []
    tiled_attention = prefill_attention.attend_sequence
    monkeypatch.setattr(attention, "attend_sequence", lambda *a: calls.append(a) or tiled_attention(*a))
    monkeypatch.setattr(attention, "MIN_BLOCKED_QUERIES", 1000)
    np.testing.assert_allclose(cpu.paged_attention(*batch, 0.2, 8, 0.0), tiled, rtol=1e-5, atol=1e-6)
    assert not calls
    monkeypatch.setattr(attention, "MIN_BLOCKED_QUERIES", 16)
    cpu.paged_attention(*batch, 0.2, 8, 0.0)
    assert len(calls) == 1


def test_tiled_attention_is_stable_for_huge_scores(tiny_tiles, blas_path):
    rng = np.random.default_rng(3)
    batch = make_paged_batch(rng, context_lens=[12], query_lens=[12], block_size=2)
    got = cpu.paged_attention(*batch, 1e4, 0, 0.0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, reference.paged_attention(*batch, 1e4, 0, 0.0), rtol=1e-4, atol=1e-4)


def test_long_prompt_with_default_tiles_matches_reference(blas_path, threading_mode):
    rng = np.random.default_rng(5)
    batch = make_paged_batch(rng, context_lens=[700], query_lens=[700], num_heads=2, num_kv_heads=1, head_dim=8,
                             block_size=16)  # 11 query blocks, two key chunks for the later ones
    for sliding_window in (0, 300):
        np.testing.assert_allclose(cpu.paged_attention(*batch, 0.3, sliding_window, 0.0),
                                   reference.paged_attention(*batch, 0.3, sliding_window, 0.0), rtol=1e-4, atol=1e-5)


def test_numpy_score_tile_stays_bounded_for_a_long_prompt(monkeypatch):
    """The biggest score matrix is one [query block x heads, key chunk] tile, not [prompt, prompt] (the sgemm
    path's buffers have that shape by construction)."""
    monkeypatch.setattr(prefill_attention, "find_sgemm", lambda: None)
    shapes = []
    real_exp = np.exp
    monkeypatch.setattr(prefill_attention.np, "exp", lambda a: shapes.append(np.shape(a)) or real_exp(a))
    rng = np.random.default_rng(5)
    batch = make_paged_batch(rng, context_lens=[700], query_lens=[700], num_heads=2, num_kv_heads=1, head_dim=8,
                             block_size=16)
    cpu.paged_attention(*batch, 0.3, 0, 0.0)
    monkeypatch.undo()
    rows = prefill_attention.QUERY_BLOCK_TOKENS * 2
    assert max(int(np.prod(s)) for s in shapes) <= rows * prefill_attention.KEY_CHUNK_TOKENS


def test_nan_queries_give_nan_rows_not_an_exception(tiny_tiles, blas_path):
    """A NaN weight upstream (a broken checkpoint) makes NaN queries: their rows come out NaN (the engine's NaN
    logits check then reports it in one line), the other rows stay finite."""
    rng = np.random.default_rng(4)
    q, *rest = make_paged_batch(rng, context_lens=[12], query_lens=[12], block_size=2)
    q[3:5] = np.nan
    got = cpu.paged_attention(q, *rest, 0.3, 0, 0.0)
    assert np.isnan(got[3:5]).all() and np.isfinite(got[:3]).all()
