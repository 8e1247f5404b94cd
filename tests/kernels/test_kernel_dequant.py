import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernel_test_data import ALL_TYPES, QUANT_TYPES, random_row_bytes, random_weight
from gguf_loader.weight_tensor import make_weight_tensor
from kernels_numba import UnsupportedQuantType, get_ops

BACKENDS = ("reference", "cpu")


def gguf_dequantize(raw: np.ndarray, ggml_type: QT) -> np.ndarray:
    if ggml_type == QT.F32:
        return raw.view(np.float32)
    return np.asarray(gguf.quants.dequantize(raw, ggml_type), dtype=np.float32)


def assert_bit_exact(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ggml_type", ALL_TYPES, ids=lambda t: t.name)
def test_dequantize_random_blocks_is_bit_exact_with_gguf(backend, ggml_type, threading_mode):
    w = random_weight(ggml_type, (5, 512), np.random.default_rng(int(ggml_type)))
    expected = gguf_dequantize(np.asarray(w.data), ggml_type).reshape(5, 512)
    assert_bit_exact(get_ops(backend).dequantize(w), expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ggml_type", [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.BF16], ids=lambda t: t.name)
def test_dequantize_of_gguf_quantized_weights_is_bit_exact(backend, ggml_type):
    values = np.random.default_rng(7).standard_normal((3, 256)).astype(np.float32)
    raw = np.asarray(gguf.quants.quantize(values, ggml_type)).view(np.uint8)
    w = make_weight_tensor("w", ggml_type, (3, 256), raw)
    assert_bit_exact(get_ops(backend).dequantize(w), gguf_dequantize(raw, ggml_type).reshape(3, 256))


def test_fp16_specials_decode_exactly():
    bits = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x3C00, 0xC000], np.uint16)
    w = make_weight_tensor("w", QT.F16, (1, bits.size), bits.view(np.uint8))
    assert_bit_exact(get_ops("cpu").dequantize(w), bits.view(np.float16).astype(np.float32)[None])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ggml_type", [QT.Q8_0, QT.Q6_K, QT.F32, QT.Q2_K, QT.Q3_K, QT.IQ4_NL, QT.IQ4_XS,
                                       QT.IQ2_XXS, QT.IQ3_XXS], ids=lambda t: t.name)
def test_dequantize_rows_and_embedding_pick_rows(backend, ggml_type):
    ops = get_ops(backend)
    w = random_weight(ggml_type, (9, 256), np.random.default_rng(3))
    full = get_ops("reference").dequantize(w)
    ids = np.array([4, 0, 8, 4])
    assert_bit_exact(ops.dequantize_rows(w, ids), full[ids])
    assert_bit_exact(ops.embedding(ids, w), full[ids])


def test_dequantize_keeps_a_multi_dimensional_shape():
    raw = random_row_bytes(QT.Q8_0, 6, 64, np.random.default_rng(0))
    w = make_weight_tensor("w", QT.Q8_0, (2, 3, 64), raw)
    assert get_ops("cpu").dequantize(w).shape == (2, 3, 64)


def test_dequantize_rows_rejects_out_of_range_ids():
    w = random_weight(QT.Q8_0, (4, 32), np.random.default_rng(0))
    with pytest.raises(IndexError):
        get_ops("cpu").dequantize_rows(w, np.array([4]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ggml_type", [QT.IQ1_S, QT.TQ1_0], ids=lambda t: t.name)
def test_unsupported_type_names_the_type_and_tensor(backend, ggml_type):
    raw = np.zeros((2, gguf.GGML_QUANT_SIZES[ggml_type][1]), np.uint8)
    w = make_weight_tensor("blk.0.ffn_up.weight", ggml_type, (2, 256), raw)
    ops = get_ops(backend)
    calls = (lambda: ops.dequantize(w), lambda: ops.dequantize_rows(w, np.array([1])),
             lambda: ops.linear(np.zeros((1, 256), np.float32), w))
    for call in calls:
        with pytest.raises(UnsupportedQuantType, match=rf"{ggml_type.name}.*blk\.0\.ffn_up\.weight"):
            call()


def test_supported_types_are_the_same_in_both_backends():
    assert get_ops("cpu").SUPPORTED_TYPES == get_ops("reference").SUPPORTED_TYPES == set(ALL_TYPES)
    assert set(QUANT_TYPES) <= get_ops("cpu").SUPPORTED_TYPES
