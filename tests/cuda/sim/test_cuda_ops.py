"""Every CUDA op against the numpy reference on tiny shapes (simulator: each CUDA thread is a Python thread)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from gguf_loader.fp8_layout import FP8_STORAGE_TYPE, make_fp8_scales
from gguf_loader.weight_tensor import WeightTensor
from kernels_numba import UnsupportedQuantType, get_ops
from kernels_numba.cpu.matvec.quant_type import SUPPORTED_TYPES
from tests.kernels.kernel_test_data import ALL_TYPES, random_weight, relative_error

cuda_ops, reference = get_ops("cuda"), get_ops("reference")
host = cuda_ops.to_host


def test_every_cpu_quant_type_is_covered():
    assert set(ALL_TYPES) == set(SUPPORTED_TYPES) == set(cuda_ops.SUPPORTED_TYPES)


@pytest.mark.parametrize("ggml_type", ALL_TYPES, ids=lambda t: t.name)
def test_dequantize_and_linear_match_the_reference(ggml_type):
    rng = np.random.default_rng(int(ggml_type))
    w = random_weight(ggml_type, (3, 256), rng)
    np.testing.assert_array_equal(host(cuda_ops.dequantize(w)), reference.dequantize(w))  # same float32 steps
    rows = np.array([2, 0, 2])
    np.testing.assert_array_equal(host(cuda_ops.dequantize_rows(w, rows)), reference.dequantize_rows(w, rows))
    x = rng.standard_normal((2, 256)).astype(np.float32)
    assert relative_error(host(cuda_ops.linear(x, w)), reference.linear(x, w)) < 1e-5


def fp8_weight(rng, shape=(5, 64), block=(2, 32)):
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x38  # no NaN codes
    scales = rng.uniform(0.5, 2.0, size=(-(-shape[0] // block[0]), -(-shape[1] // block[1]))).astype(np.float32)
    return WeightTensor("fp8", FP8_STORAGE_TYPE, shape, codes, fp8=make_fp8_scales("fp8", scales, shape, block))


def test_fp8_weights_with_block_scales():
    rng = np.random.default_rng(8)
    w = fp8_weight(rng)
    np.testing.assert_array_equal(host(cuda_ops.dequantize(w)), reference.dequantize(w))
    x = rng.standard_normal((3, 64)).astype(np.float32)
    assert relative_error(host(cuda_ops.linear(x, w)), reference.linear(x, w)) < 1e-5


def test_fp8_nan_codes_decode_to_nan():
    """E4M3 0x7f / 0xff are NaN, as in the reference (E4M3_TABLE): only the rows holding one give NaN."""
    rng = np.random.default_rng(9)
    w = fp8_weight(rng)
    w.data[1, 3], w.data[4, 60] = 0x7F, 0xFF
    decoded = host(cuda_ops.dequantize(w))
    np.testing.assert_array_equal(decoded, reference.dequantize(w))
    assert np.isnan(decoded[1, 3]) and np.isnan(decoded[4, 60]) and np.isnan(decoded).sum() == 2
    y = host(cuda_ops.linear(rng.standard_normal((2, 64)).astype(np.float32), w))
    np.testing.assert_array_equal(np.isnan(y), np.broadcast_to(np.isin(np.arange(5), [1, 4]), y.shape))


def test_linear_serves_more_tokens_than_one_pass():
    rng = np.random.default_rng(3)
    w = random_weight(QT.Q4_K, (2, 256), rng)
    x = rng.standard_normal((11, 256)).astype(np.float32)  # two passes of 8 tokens
    assert relative_error(host(cuda_ops.linear(x, w)), reference.linear(x, w)) < 1e-5


def test_weights_are_uploaded_once():
    w = random_weight(QT.Q8_0, (2, 32), np.random.default_rng(4))
    assert cuda_ops.upload_weight(w) is cuda_ops.upload_weight(w)
    assert cuda_ops.upload_weight(w).nbytes >= w.nbytes


def test_unsupported_type_names_the_tensor():
    w = WeightTensor("blk.0.odd", QT.I8, (2, 4), np.zeros((2, 4), np.uint8))
    with pytest.raises(UnsupportedQuantType, match="cuda kernels do not support ggml type I8.*blk.0.odd"):
        cuda_ops.linear(np.zeros((1, 4), np.float32), w)


def test_embedding_rows():
    rng = np.random.default_rng(5)
    w = random_weight(QT.Q6_K, (6, 256), rng)
    ids = np.array([5, 1, 5])
    np.testing.assert_array_equal(host(cuda_ops.embedding(ids, w)), reference.embedding(ids, w))


def test_rms_norm_rows_and_heads():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 2, 40)).astype(np.float32)
    weight = rng.standard_normal(40).astype(np.float32)
    np.testing.assert_allclose(host(cuda_ops.rms_norm(x, weight, 1e-6)), reference.rms_norm(x, weight, 1e-6),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:overflow encountered")  # exp(-x) -> inf, as on the device: silu -> -0
@pytest.mark.parametrize("name", ["silu", "gelu_tanh"])
def test_activations(name):
    x = np.linspace(-100, 30, 300).astype(np.float32)
    np.testing.assert_allclose(host(getattr(cuda_ops, name)(x)), getattr(reference, name)(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["silu_mul", "gelu_mul"])
def test_gated_products(name):
    rng = np.random.default_rng(7)
    gate = rng.standard_normal((2, 3, 50)).astype(np.float32) * 4
    up = rng.standard_normal((2, 3, 50)).astype(np.float32)
    np.testing.assert_allclose(host(getattr(cuda_ops, name)(gate, up)), getattr(reference, name)(gate, up),
                               rtol=1e-5, atol=1e-6)


def test_softcap_and_model_arithmetic():
    rng = np.random.default_rng(9)
    x, y = (rng.standard_normal((4, 30)).astype(np.float32) * 40 for _ in range(2))
    np.testing.assert_allclose(host(cuda_ops.softcap(x, 30.0)), reference.softcap(x, 30.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(host(cuda_ops.add(x, y)), x + y)
    np.testing.assert_array_equal(host(cuda_ops.scale(x, 0.5)), x * np.float32(0.5))
    bias = rng.standard_normal(30).astype(np.float32)
    np.testing.assert_array_equal(host(cuda_ops.add_bias(x, bias)), x + bias)
    parts = cuda_ops.split_columns(x, [10, 15, 5])
    for got, want in zip(parts, np.split(x, [10, 25], axis=1)):
        np.testing.assert_array_equal(host(got), want)


@pytest.mark.parametrize("is_neox", [False, True])
def test_rope_with_scaling_and_factors(is_neox):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 2, 16)).astype(np.float32)
    positions = np.array([0, 7, 4000])
    factors = rng.uniform(1.0, 4.0, 8).astype(np.float32)
    for freq_factors in (None, factors):
        got = cuda_ops.rope(x, positions, 10000.0, is_neox, 0.5, freq_factors)
        want = reference.rope(x, positions, 10000.0, is_neox, 0.5, freq_factors)
        np.testing.assert_allclose(host(got), want, rtol=1e-5, atol=1e-5)
