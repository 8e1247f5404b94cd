import numpy as np
import pytest

from kernel_test_data import relative_error
from kernels_numba import get_ops

cpu, reference = get_ops("cpu"), get_ops("reference")
RNG = np.random.default_rng(11)


@pytest.mark.parametrize("shape", [(1, 640), (7, 256), (3, 4, 256)])
def test_rms_norm(shape, threading_mode):
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    weight = RNG.standard_normal(shape[-1]).astype(np.float32)
    expected = reference.rms_norm(x, weight, 1e-6)
    np.testing.assert_allclose(cpu.rms_norm(x, weight, 1e-6), expected, rtol=2e-5, atol=1e-6)
    out = np.empty_like(x)
    assert cpu.rms_norm(x, weight, 1e-6, out=out) is out


@pytest.mark.parametrize("shape", [(1, 640), (8, 640), (32, 256)])
def test_rms_norm_in_place_gives_the_same_bits_as_into_another_array(shape, threading_mode):
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    weight = RNG.standard_normal(shape[-1]).astype(np.float32)
    separate = cpu.rms_norm(x, weight, 1e-6, out=np.empty_like(x))
    in_place = x.copy()
    assert cpu.rms_norm(in_place, weight, 1e-6, out=in_place) is in_place
    assert np.array_equal(in_place, separate)
    rows = x.copy()  # the kernel's row range: rows outside it stay as they were
    from kernels_numba.cpu.norm import rms_norm_rows_into
    rms_norm_rows_into(rows, weight, 1e-6, rows, 0, 1)
    assert np.array_equal(rows[0], separate[0]) and np.array_equal(rows[1:], x[1:])


def test_rms_norm_matches_its_definition():
    x = np.array([[3.0, 4.0]], np.float32)
    y = reference.rms_norm(x, np.array([1.0, 2.0], np.float32), 0.0)
    np.testing.assert_allclose(y, x / np.sqrt(12.5) * [1.0, 2.0], rtol=1e-6)


@pytest.mark.parametrize("size", [100, 70_000])
@pytest.mark.parametrize("name", ["silu", "gelu_tanh"])
def test_activations(name, size, threading_mode):
    x = np.concatenate([(RNG.standard_normal(size) * 4), [-100.0, -20.0, 0.0, 20.0, 100.0]]).astype(np.float32)
    np.testing.assert_allclose(getattr(cpu, name)(x), getattr(reference, name)(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["silu_mul", "gelu_mul"])
def test_gated_activations(name, threading_mode):
    gate, up = (RNG.standard_normal((2, 3, 2048)) * 3).astype(np.float32), RNG.standard_normal((2, 3, 2048)).astype(np.float32)
    got = getattr(cpu, name)(gate, up)
    assert got.shape == gate.shape
    np.testing.assert_allclose(got, getattr(reference, name)(gate, up), rtol=1e-5, atol=1e-6)


def test_gelu_is_ggmls_tanh_approximation():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(cpu.gelu_tanh(x), expected, rtol=1e-6, atol=1e-7)


def test_softcap():
    x = (RNG.standard_normal((5, 1000)) * 100).astype(np.float32)
    got = cpu.softcap(x, 30.0)
    np.testing.assert_allclose(got, reference.softcap(x, 30.0), rtol=1e-5, atol=1e-5)
    assert np.abs(got).max() <= 30.0


@pytest.mark.parametrize("is_neox", [False, True])
@pytest.mark.parametrize("with_scaling", [False, True])
def test_rope(is_neox, with_scaling, threading_mode):
    x = RNG.standard_normal((6, 4, 64)).astype(np.float32)
    positions = np.array([0, 1, 2, 100, 5000, 131000])
    kwargs = {}
    if with_scaling:
        kwargs = {"freq_scale": 0.25, "freq_factors": RNG.uniform(1, 8, 32).astype(np.float32)}
    expected = reference.rope(x, positions, 10000.0, is_neox, **kwargs)
    got = cpu.rope(x, positions, 10000.0, is_neox, **kwargs)
    assert relative_error(got, expected) < 1e-5
    np.testing.assert_allclose(got[0], x[0], rtol=0, atol=0)  # position 0 is the identity


def test_rope_pairs_follow_llama_cpp():
    x = np.zeros((1, 1, 4), np.float32)
    x[0, 0, 0] = 1.0  # rotate (1, 0) in pair 0 by 90 degrees: theta_0 = pos * base^0
    angle_pos = np.array([1])
    normal = reference.rope(x, angle_pos, 10000.0, is_neox=False, freq_scale=np.pi / 2)
    neox = reference.rope(x, angle_pos, 10000.0, is_neox=True, freq_scale=np.pi / 2)
    np.testing.assert_allclose(normal[0, 0], [0, 1, 0, 0], atol=1e-6)  # pair (x0, x1)
    np.testing.assert_allclose(neox[0, 0], [0, 0, 1, 0], atol=1e-6)  # pair (x0, x2)
    np.testing.assert_allclose(cpu.rope(x, angle_pos, 10000.0, False, np.pi / 2), normal, atol=1e-6)
    np.testing.assert_allclose(cpu.rope(x, angle_pos, 10000.0, True, np.pi / 2), neox, atol=1e-6)


def test_rope_in_place():
    x = RNG.standard_normal((3, 2, 16)).astype(np.float32)
    expected = reference.rope(x, np.arange(3), 1e6, True)
    assert cpu.rope(x, np.arange(3), 1e6, True, out=x) is x
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["silu_mul", "gelu_mul"])
@pytest.mark.parametrize("out_is", ["gate", "up"])
def test_gated_activations_in_place_give_the_same_bits(name, out_is):
    """The decode layer and prefill write the activation over gate: the same bits as a separate output (the
    scratch run keeps the in-place loop on the vectorised path, and it must not change a value)."""
    gate = (RNG.standard_normal((3, 2048 + 40)) * 3).astype(np.float32)
    up = RNG.standard_normal(gate.shape).astype(np.float32)
    separate = getattr(cpu, name)(gate, up)
    gate_copy, up_copy = gate.copy(), up.copy()
    out = gate_copy if out_is == "gate" else up_copy
    assert getattr(cpu, name)(gate_copy, up_copy, out=out) is out
    np.testing.assert_array_equal(out, separate)
    np.testing.assert_allclose(separate, getattr(reference, name)(gate, up), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("is_neox", [False, True])
def test_rope_in_place_gives_the_same_bits(is_neox):
    x = RNG.standard_normal((5, 4, 256)).astype(np.float32)
    positions = np.array([0, 3, 60, 999, 70000])
    separate = cpu.rope(x, positions, 1e6, is_neox)
    in_place = x.copy()
    cpu.rope(in_place, positions, 1e6, is_neox, out=in_place)
    np.testing.assert_array_equal(in_place, separate)
    assert relative_error(separate, reference.rope(x, positions, 1e6, is_neox)) < 1e-5
