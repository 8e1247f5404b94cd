import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernel_test_data import ALL_TYPES, random_weight, relative_error
from kernels_numba import get_ops
from kernels_numba.cpu.matvec import dispatch, quant_type
from kernels_numba.cpu.matvec.int8_matvec import INT8_CODES
from kernels_numba.reference_int8 import linear_int8_activations

cpu, reference = get_ops("cpu"), get_ops("reference")


def float64_matmul(x: np.ndarray, w) -> np.ndarray:
    return x.astype(np.float64) @ reference.dequantize(w).astype(np.float64).T


def cpu_oracle(x: np.ndarray, w) -> np.ndarray:
    """What the CPU linear computes: 8-bit activations for the types with an integer dot (int8_dot.py; longer
    batches multiply the rounded activations in float32), else exact."""
    if dispatch.USE_INT8_DOT and quant_type.type_code_of(w) in INT8_CODES:
        return linear_int8_activations(x, w)
    return float64_matmul(x, w)


@pytest.mark.parametrize("num_tokens", [1, 2, 5, 11, 37])  # 11: the paired fused path past 8 tokens
@pytest.mark.parametrize("ggml_type", ALL_TYPES, ids=lambda t: t.name)
def test_linear_matches_float64_dequantized_matmul(ggml_type, num_tokens, threading_mode):
    rng = np.random.default_rng(int(ggml_type) * 100 + num_tokens)
    w = random_weight(ggml_type, (300, 512), rng)
    x = rng.standard_normal((num_tokens, 512)).astype(np.float32)
    for ops, expected in ((cpu, cpu_oracle(x, w)), (reference, float64_matmul(x, w))):
        y = ops.linear(x, w)
        assert y.shape == (num_tokens, 300) and y.dtype == np.float32
        assert relative_error(y, expected) < 1e-4


@pytest.mark.parametrize("num_tokens", [1, 5])
def test_linear_handles_row_counts_that_are_not_a_multiple_of_the_row_group(num_tokens, threading_mode):
    rng = np.random.default_rng(5)
    for num_rows in (1, 2, 3, 5, 7):
        for ggml_type in (QT.Q8_0, QT.Q5_0, QT.Q4_K):
            w = random_weight(ggml_type, (num_rows, 256), rng)
            x = rng.standard_normal((num_tokens, 256)).astype(np.float32)
            assert relative_error(cpu.linear(x, w), cpu_oracle(x, w)) < 1e-4


def test_linear_writes_into_out():
    rng = np.random.default_rng(1)
    w = random_weight(QT.Q8_0, (64, 128), rng)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    out = np.full((3, 64), np.nan, np.float32)
    assert cpu.linear(x, w, out=out) is out
    assert relative_error(out, cpu_oracle(x, w)) < 1e-4


def test_linear_rejects_mismatched_shapes():
    w = random_weight(QT.Q8_0, (8, 64), np.random.default_rng(0))
    with pytest.raises(ValueError, match="x has shape"):
        cpu.linear(np.zeros((2, 32), np.float32), w)
    with pytest.raises(ValueError, match="out must be"):
        cpu.linear(np.zeros((2, 64), np.float32), w, out=np.zeros((2, 7), np.float32))


def test_linear_never_writes_the_weight_bytes():
    w = random_weight(QT.Q4_K, (16, 256), np.random.default_rng(0))
    before = np.array(w.data)
    cpu.linear(np.ones((1, 256), np.float32), w)
    cpu.linear(np.ones((9, 256), np.float32), w)
    np.testing.assert_array_equal(np.asarray(w.data), before)
