"""The CPU twins of the Qwen3-Next / Qwen3.5 glue ops against their numpy references."""
import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba import reference_deltanet as ref_dn
from kernels_numba import reference_gated_attention as ref_ga

cpu = get_ops("cpu")


def test_deltanet_gates_and_gated_norm():
    rng = np.random.default_rng(0)
    b, alpha = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    a, dt_bias = -np.exp(rng.standard_normal(4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    for got, expected in zip(cpu.deltanet_gates(b, alpha, a, dt_bias), ref_dn.deltanet_gates(b, alpha, a, dt_bias)):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    x, z, w = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2, 8), (3, 16), (8,)))
    np.testing.assert_allclose(cpu.gated_rms_norm(x, w, z, 1e-6), ref_dn.gated_rms_norm(x, w, z, 1e-6),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grouped", [True, False])
def test_expand_heads(grouped):
    x = np.random.default_rng(1).standard_normal((2, 2, 5)).astype(np.float32)
    np.testing.assert_allclose(cpu.expand_heads(x, 4, grouped, 0.5), ref_dn.expand_heads(x, 4, grouped, 0.5))


def test_sigmoid_mul_and_rope_partial():
    rng = np.random.default_rng(2)
    x, gate = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((3, 1)).astype(np.float32)
    np.testing.assert_allclose(cpu.sigmoid_mul(x, gate), ref_ga.sigmoid_mul(x, gate), rtol=1e-6)
    heads = rng.standard_normal((3, 2, 16)).astype(np.float32)
    positions = np.array([0, 3, 70])
    np.testing.assert_allclose(cpu.rope_partial(heads.copy(), positions, 10000.0, 8),
                               ref_ga.rope_partial(heads, positions, 10000.0, 8), rtol=1e-5, atol=1e-6)
