"""store_kv and paged_attention on the device against the reference (mixed prefill/decode batch, GQA)."""
import numpy as np
import pytest

from kernels_numba import get_ops

cuda_ops, reference = get_ops("cuda"), get_ops("reference")


def paged_batch(rng, context_lens, query_lens, num_heads=4, num_kv_heads=2, head_dim=40, block_size=4):
    """Keys/values of whole sequences in shuffled blocks (written by cuda store_kv), plus queries."""
    blocks_per_seq = [-(-n // block_size) for n in context_lens]
    block_ids = rng.permutation(sum(blocks_per_seq) + 2)
    tables = np.full((len(context_lens), max(blocks_per_seq)), -1, np.int32)
    start = 0
    for s, count in enumerate(blocks_per_seq):
        tables[s, :count] = block_ids[start:start + count]
        start += count
    shape = (len(block_ids), block_size, num_kv_heads, head_dim)
    host_k, host_v = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    dev_k, dev_v = cuda_ops.zeros(shape), cuda_ops.zeros(shape)
    for s, num_tokens in enumerate(context_lens):
        positions = np.arange(num_tokens)
        slots = tables[s, positions // block_size].astype(np.int64) * block_size + positions % block_size
        slots[0] = -1 if s == 0 else slots[0]  # a skipped slot stays zero in both caches
        keys, values = (rng.standard_normal((num_tokens, num_kv_heads, head_dim)).astype(np.float32)
                        for _ in range(2))
        reference.store_kv(keys, values, host_k, host_v, slots)
        cuda_ops.store_kv(keys, values, dev_k, dev_v, slots)
    starts = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    q = rng.standard_normal((int(starts[-1]), num_heads, head_dim)).astype(np.float32)
    return q, (host_k, host_v), (dev_k, dev_v), tables, np.array(context_lens, np.int32), starts


@pytest.mark.parametrize("sliding_window, softcap", [(0, 0.0), (3, 5.0)])
def test_paged_attention_matches_the_reference(sliding_window, softcap):
    rng = np.random.default_rng(sliding_window)
    # a fresh prefill, a chunked prefill, a decode, and a sequence with no queries this step
    q, host_cache, dev_cache, tables, lens, starts = paged_batch(rng, [5, 9, 6, 3], [5, 3, 1, 0])
    np.testing.assert_array_equal(cuda_ops.to_host(dev_cache[0]), host_cache[0])
    args = (tables, lens, starts, 0.2, sliding_window, softcap)
    got = cuda_ops.to_host(cuda_ops.paged_attention(q, *dev_cache, *args))
    np.testing.assert_allclose(got, reference.paged_attention(q, *host_cache, *args), rtol=1e-5, atol=1e-6)
