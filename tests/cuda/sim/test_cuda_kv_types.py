"""store_kv and paged_attention on the device with every KV cache type: the device writes the numpy oracle's bytes
(kernels_numba/reference_kv.py) and attends over them as the oracle does (blocks spread over the pool, a prefill
beside a decode)."""
import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba.kv_type import KV_TYPES, make_kv_layer

cuda_ops, reference = get_ops("cuda"), get_ops("reference")


@pytest.mark.parametrize("name", list(KV_TYPES))
def test_device_cache_of_every_kv_type_matches_the_oracle(name):
    kv_type, rng = KV_TYPES[name], np.random.default_rng(6)
    head_dim = 64 if kv_type.is_blocked else 40  # f32 / f16 / bf16 rows need no whole blocks of 32
    head_dim = 160 if name == "q4_0" else head_dim  # a q4_0 row of 160 keeps its 2 largest values apart
    host = [make_kv_layer(6, 4, 1, head_dim, kv_type) for _ in range(2)]
    device = [make_kv_layer(6, 4, 1, head_dim, kv_type, zeros=cuda_ops.zeros) for _ in range(2)]
    tables, context_lens = np.array([[3, 0], [5, 1]], np.int32), np.array([7, 5], np.int32)
    for seq, num_tokens in enumerate(context_lens):
        positions = np.arange(num_tokens)
        slots = tables[seq, positions // 4].astype(np.int64) * 4 + positions % 4
        keys, values = (rng.standard_normal((2, num_tokens, 1, head_dim)) * 3).astype(np.float32)
        keys[0, 0, :4] = [0.0, -0.0, 1e-8, 1.00048828125]  # zeros, an fp16 subnormal, an fp16 tie
        reference.store_kv(keys, values, *host, slots)
        cuda_ops.store_kv(keys, values, *device, slots)
    for got, expected in zip(device, host):
        np.testing.assert_array_equal(cuda_ops.to_host(got), np.asarray(expected))
    starts = np.array([0, 7, 8], np.int32)  # sequence 0's whole prompt, one decode of sequence 1
    q = rng.standard_normal((8, 2, head_dim)).astype(np.float32)
    got = cuda_ops.to_host(cuda_ops.paged_attention(q, *device, tables, context_lens, starts, 0.125, 3, 5.0))
    expected = reference.paged_attention(q, *host, tables, context_lens, starts, 0.125, 3, 5.0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
