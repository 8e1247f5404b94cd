"""The 8-bit-activation mat-vec (int8_dot / int8_matvec) against its numpy oracle (reference_int8)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from numba import njit

from kernel_test_data import random_weight, relative_error
from kernels_numba.cpu.ir import byte_dot
from kernels_numba.cpu.matvec import int8_dot, quant_type
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.cpu.matvec import int8_matvec
from kernels_numba.reference import dequantize
from kernels_numba.reference_int8 import linear_int8_activations, quantize_activations


def int8_matvec_into(code, data, x, out):
    """The int8 path's glue with its leaf for `code` (what dispatch's int8 path runs)."""
    int8_matvec.int8_matvec_into(int8_matvec.groups_kernel(code), code, data, x, out)


def _quantized(x):
    n, k = x.shape
    quants = np.empty((n, k), np.int8)
    scales = np.empty((n, k // 32), np.float32)
    lane_sums = np.empty((n, k // 4), np.int32)
    block_sums = np.empty((n, k // 32), np.float32)
    int8_dot.quantize_activations_into(x, quants, scales, lane_sums, block_sums)
    return quants, scales, lane_sums, block_sums


def _dot_operands(ggml_type, x):
    """What the dots of ggml_type read for x: (quants, lane scales, lane starts, block sums)."""
    from kernels_numba.cpu.matvec.int8_matvec import activation_operands
    return activation_operands(getattr(quant_type, ggml_type.name), *_quantized(x))


def test_lane_operands_spread_the_scales_and_start_at_minus_the_zero_point_times_the_lane_sums():
    x = np.random.default_rng(9).standard_normal((2, 128)).astype(np.float32)
    _, scales, lane_sums, _ = _quantized(x)
    for ggml_type, zero_point in ((QT.Q8_0, 128), (QT.Q5_0, 16), (QT.Q4_0, 8), (QT.Q6_K, 32), (QT.Q4_K, 0)):
        _, lane_scales, lane_starts, _ = _dot_operands(ggml_type, x)
        np.testing.assert_array_equal(lane_scales, np.repeat(scales, 8, axis=1))
        np.testing.assert_array_equal(lane_starts, -zero_point * lane_sums)


def test_activation_quantization_matches_the_reference():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 256)) * rng.uniform(0.01, 100, (3, 256))).astype(np.float32)
    x[1, 32:64] = 0.0  # an all-zero block: scale 0, quants 0
    quants, scales, lane_sums, block_sums = _quantized(x)
    expected_quants, expected_scales = quantize_activations(x)
    np.testing.assert_array_equal(quants, expected_quants)
    np.testing.assert_array_equal(scales, expected_scales)
    np.testing.assert_array_equal(lane_sums, expected_quants.astype(np.int32).reshape(3, -1, 4).sum(-1))
    quant_sums = expected_quants.astype(np.int32).reshape(3, -1, 32).sum(-1).astype(np.float32)
    np.testing.assert_array_equal(block_sums, expected_scales * quant_sums)
    assert np.abs(quants).max() == 127 and scales[1, 1] == 0


def test_activation_quantization_of_strided_arrays_matches_contiguous():
    """The block IR reads and writes rows in place; strided rows go through contiguous copies."""
    x = np.random.default_rng(2).standard_normal((3, 128)).astype(np.float32)
    wide = np.zeros((3, 256), np.float32)
    wide[:, ::2] = x
    outputs = (np.zeros((3, 256), np.int8), np.zeros((3, 4), np.float32), np.zeros((3, 64), np.int32),
               np.zeros((3, 4), np.float32))
    strided = (outputs[0][:, ::2], outputs[1], outputs[2][:, ::2], outputs[3])
    int8_dot.quantize_activations_into(wide[:, ::2], *strided)
    for got, expected in zip(strided, _quantized(x)):
        np.testing.assert_array_equal(got, expected)
    assert not outputs[0][:, 1::2].any() and not outputs[2][:, 1::2].any()  # the gaps untouched


def test_activation_scales_of_special_values():
    """max|x| is taken on the float bits: -0, subnormals and huge finite values give the reference's scale, and a
    block holding nan or +-inf gets a nan scale (its dots become nan, as float math would)."""
    x = np.random.default_rng(4).standard_normal((1, 8 * 32)).astype(np.float32)
    x[0, 0:32] = -0.0
    x[0, 32:64] = np.float32(1e-40) * np.arange(32)  # subnormals
    x[0, 64] = np.float32(-3.0e38)  # finite, near the float32 limit (and next to a block of its own sign)
    x[0, 65] = np.float32(3.0e38)
    x[0, 96 + 7] = np.nan
    x[0, 128 + 3] = np.inf
    x[0, 160 + 31] = -np.inf
    _, scales, _, _ = _quantized(x)
    finite_blocks = [0, 1, 2, 6, 7]
    _, expected = quantize_activations(x[:, np.repeat(np.array(finite_blocks) * 32, 32) + np.tile(np.arange(32), 5)])
    np.testing.assert_array_equal(scales[0, finite_blocks], expected[0])
    assert np.isnan(scales[0, 3:6]).all() and scales[0, 0] == 0


INT8_TYPES = (QT.Q8_0, QT.Q5_0, QT.Q4_0, QT.Q4_1, QT.Q6_K, QT.Q4_K)
BLOCK_TYPES = (QT.Q8_0, QT.Q5_0, QT.Q4_0, QT.Q4_1)  # 32 values per block: rows may hold an odd number of blocks
# the lane dot kinds this process's target can run (ir/byte_dot.py), compared with the portable one
KINDS_HERE = byte_dot.TARGET_KINDS


def _row_length(ggml_type, num_blocks_of_32):
    return 32 * num_blocks_of_32 if ggml_type in BLOCK_TYPES else 512


@pytest.mark.parametrize("ggml_type", INT8_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("num_rows", [1, 3, 5, 300])  # row groups of 4 with a short last group
@pytest.mark.parametrize("num_tokens", [1, 3, 16])
def test_matvec_matches_the_int8_reference(ggml_type, num_rows, num_tokens, threading_mode):
    rng = np.random.default_rng(num_rows * 10 + num_tokens)
    row_length = _row_length(ggml_type, 15 if num_rows == 3 else 16)  # block types: an odd block count too
    w = random_weight(ggml_type, (num_rows, row_length), rng)  # random bytes: every quant (Q8_0: -128 included)
    x = rng.standard_normal((num_tokens, row_length)).astype(np.float32)
    out = np.full((num_tokens, num_rows), np.nan, np.float32)
    int8_matvec_into(quant_type.type_code_of(w), readonly_bytes(w), x, out)
    assert relative_error(out, linear_int8_activations(x, w)) < 1e-5
    exact = x.astype(np.float64) @ dequantize(w).astype(np.float64).T
    assert relative_error(out, exact) < 2e-2  # the activation rounding itself: ~0.5% on random data


@pytest.mark.parametrize("ggml_type", INT8_TYPES, ids=lambda t: t.name)
def test_a_token_gets_the_same_bits_alone_and_inside_a_batch(ggml_type):
    """Speculative verify sends k+1 tokens at once (passes of 4 tokens, then one at a time): each must equal
    its one-token result exactly."""
    rng = np.random.default_rng(3)
    row_length = _row_length(ggml_type, 21)
    data = readonly_bytes(random_weight(ggml_type, (37, row_length), rng))
    x = rng.standard_normal((9, row_length)).astype(np.float32)
    code = getattr(quant_type, ggml_type.name)
    batch = np.empty((9, 37), np.float32)
    int8_matvec_into(code, data, x, batch)
    for t in range(9):
        alone = np.empty((1, 37), np.float32)
        int8_matvec_into(code, data, x[t:t + 1], alone)
        np.testing.assert_array_equal(alone[0], batch[t])


def test_non_finite_activations_propagate():
    rng = np.random.default_rng(4)
    data = readonly_bytes(random_weight(QT.Q8_0, (8, 64), rng))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    x[0, 5], x[1, 40], x[4, 0] = np.nan, np.inf, -np.inf  # inside a pass of 4 tokens and alone
    out = np.zeros((5, 8), np.float32)
    int8_matvec_into(quant_type.Q8_0, data, x, out)
    assert np.isnan(out[[0, 1, 4]]).all() and np.isfinite(out[[2, 3]]).all()


def _dots_with(dots, num_tokens):
    """An uncached njit mat-vec over num_tokens tokens with the given dots flavour (its assembly can be read)."""
    @njit
    def matvec(data, quants, lane_scales, lane_starts, block_sums, out):
        last = data.shape[0] - 1
        for r in range(0, data.shape[0], 4):
            rows = (r, min(r + 1, last), min(r + 2, last), min(r + 3, last))
            values = dots(data, *rows, quants, lane_scales, lane_starts, block_sums, 0, 0)
            for t in range(num_tokens):
                for g in range(min(4, data.shape[0] - r)):
                    out[t, r + g] = values[4 * t + g]
    return matvec


@pytest.mark.parametrize("ggml_type", INT8_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("kind", [kind for kind in KINDS_HERE if kind != byte_dot.PORTABLE])
def test_every_lane_dot_kind_gives_the_portable_results(ggml_type, kind):
    """vpdpbusd (zmm, ymm) and vpmaddubsw (Q8_0: on the signed weights) compute the integers of the plain IR
    used where the CPU has neither; random bytes hit every quant, Q8_0's -128 included."""
    rng = np.random.default_rng(5)
    row_length = _row_length(ggml_type, 9)
    data = readonly_bytes(random_weight(ggml_type, (10, row_length), rng))
    for num_tokens in (1, 4):
        x8 = _dot_operands(ggml_type, (rng.standard_normal((num_tokens, row_length)) * 4).astype(np.float32))
        portable, fast = (np.empty((num_tokens, 10), np.float32) for _ in range(2))
        _dots_with(int8_dot.dots_of_kind(ggml_type.name, byte_dot.PORTABLE)[num_tokens == 4], num_tokens)(
            data, *x8, portable)
        _dots_with(int8_dot.dots_of_kind(ggml_type.name, kind)[num_tokens == 4], num_tokens)(data, *x8, fast)
        np.testing.assert_array_equal(portable, fast)


# an instruction only each kind's code has
KIND_INSTRUCTION = {byte_dot.VNNI512: "vpdpbusd", byte_dot.AVXVNNI: "vpdpbusd", byte_dot.AVX2: "vpmaddubsw"}


@pytest.mark.parametrize("ggml_type", (QT.Q8_0, QT.Q6_K), ids=lambda t: t.name)
@pytest.mark.parametrize("kind", KINDS_HERE)
def test_each_kind_uses_its_instructions(ggml_type, kind):
    data = readonly_bytes(random_weight(ggml_type, (4, 256), np.random.default_rng(6)))
    x8 = _dot_operands(ggml_type, np.ones((4, 256), np.float32))
    matvec = _dots_with(int8_dot.dots_of_kind(ggml_type.name, kind)[1], 4)
    matvec(data, *x8, np.empty((4, 4), np.float32))
    assembly = matvec.inspect_asm(matvec.signatures[0])
    for other_kind, instruction in KIND_INSTRUCTION.items():
        assert (instruction in assembly) == (KIND_INSTRUCTION.get(kind) == instruction), (other_kind, instruction)


def test_rounded_activations_are_the_quants_times_their_scale():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 128)) * 3).astype(np.float32)
    quants, scales = quantize_activations(x)
    expected = quants.astype(np.float32) * np.repeat(scales, 32, axis=1)
    np.testing.assert_array_equal(int8_dot.round_activations(x), expected)


@pytest.mark.parametrize("ggml_type", INT8_TYPES, ids=lambda t: t.name)
def test_a_long_batch_agrees_with_the_int8_dots(ggml_type):
    """Past MAX_INT8_TOKENS linear multiplies decoded tiles with BLAS; on the rounded activations its rows equal
    the one-token integer dots up to float32 summation order (prefill and decode see the same activations)."""
    from kernels_numba import get_ops
    from kernels_numba.cpu.matvec import dispatch
    rng = np.random.default_rng(8)
    num_tokens = dispatch.MAX_INT8_TOKENS + 2
    w = random_weight(ggml_type, (40, 256), rng)
    x = rng.standard_normal((num_tokens, 256)).astype(np.float32)
    cpu = get_ops("cpu")
    assert not dispatch.uses_int8_dot(quant_type.type_code_of(w), num_tokens)
    batch = cpu.linear(x, w)
    alone = np.concatenate([cpu.linear(x[t:t + 1], w) for t in range(num_tokens)])
    assert relative_error(batch, alone) < 1e-5
