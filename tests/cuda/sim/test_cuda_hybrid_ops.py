"""The Qwen3-Next / Qwen3.5 glue ops and the device array layout ops against numpy, on tiny shapes."""
import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba import reference_deltanet as ref_dn
from kernels_numba import reference_gated_attention as ref_ga

cuda_ops = get_ops("cuda")
host = cuda_ops.to_host


def test_deltanet_gates_with_large_inputs():
    rng = np.random.default_rng(0)
    b, alpha = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    alpha[0, 0], alpha[1, 1], b[2, 2] = 60.0, -60.0, -90.0  # softplus and sigmoid far out on both sides
    a, dt_bias = -np.exp(rng.standard_normal(4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    g, beta = cuda_ops.deltanet_gates(b, alpha, a, dt_bias)
    expected_g, expected_beta = ref_dn.deltanet_gates(b, alpha, a, dt_bias)
    np.testing.assert_allclose(host(g), expected_g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host(beta), expected_beta, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "tiled"])
def test_expand_heads(grouped):
    x = np.random.default_rng(1).standard_normal((2, 2, 5)).astype(np.float32)
    np.testing.assert_allclose(host(cuda_ops.expand_heads(x, 6, grouped, 0.25)),
                               ref_dn.expand_heads(x, 6, grouped, 0.25), rtol=1e-6)
    with pytest.raises(ValueError, match="expand_heads"):
        cuda_ops.expand_heads(x, 5, grouped)


def test_gated_rms_norm():
    rng = np.random.default_rng(2)
    x, z = rng.standard_normal((3, 2, 40)).astype(np.float32), rng.standard_normal((3, 80)).astype(np.float32)
    weight = rng.standard_normal(40).astype(np.float32)
    got = host(cuda_ops.gated_rms_norm(x, weight, z, 1e-6))
    assert got.shape == (3, 80)
    np.testing.assert_allclose(got, ref_dn.gated_rms_norm(x, weight, z, 1e-6), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gate_cols", [6, 1], ids=["per_value", "per_row"])
def test_sigmoid_mul(gate_cols):
    rng = np.random.default_rng(3)
    x, gate = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((3, gate_cols)).astype(np.float32)
    np.testing.assert_allclose(host(cuda_ops.sigmoid_mul(x, gate)), ref_ga.sigmoid_mul(x, gate), rtol=1e-6)
    with pytest.raises(ValueError, match="sigmoid_mul"):
        cuda_ops.sigmoid_mul(x, gate[:2])


@pytest.mark.parametrize("rotary_dim", [8, 16])
def test_rope_partial(rotary_dim):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2, 16)).astype(np.float32)
    positions = np.array([0, 5, 1000])
    expected = ref_ga.rope_partial(x, positions, 10000.0, rotary_dim)
    got = host(cuda_ops.rope_partial(x, cuda_ops.to_device(positions, np.int64), 10000.0, rotary_dim))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])
    with pytest.raises(ValueError, match="rotary_dim"):
        cuda_ops.rope_partial(x, positions, 10000.0, 7)


def test_layout_ops():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(host(cuda_ops.concat_columns([a, b])), np.concatenate([a, b], axis=1))
    s, t = rng.standard_normal((2, 2, 3)).astype(np.float32), rng.standard_normal((1, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(host(cuda_ops.concat_rows([s, t])), np.concatenate([s, t]))
    np.testing.assert_array_equal(host(cuda_ops.repeat_rows(a, 3)), np.repeat(a, 3, axis=0))
    pool = cuda_ops.to_device(rng.standard_normal((3, 2, 3)).astype(np.float32))  # a state per slot
    snapshot = cuda_ops.copy_array(pool[1])
    cuda_ops.assign(pool[1], t[0])
    np.testing.assert_array_equal(host(pool)[1], t[0])
    cuda_ops.fill_zeros(pool[2])
    cuda_ops.assign(pool[1], snapshot)
    expected = host(pool)
    assert not expected[2].any() and np.array_equal(expected[1], host(snapshot))
    with pytest.raises(ValueError, match="assign"):
        cuda_ops.assign(pool[0], a)
