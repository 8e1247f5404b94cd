"""The batched fused mat-vec (batch_dot, 2-12 tokens) against the float64 numpy reference."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernel_test_data import random_weight, relative_error
from kernels_numba import get_ops
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu import parallel_policy
from kernels_numba.cpu.matvec.batch_dot import BATCH_CODES, batch_kernel, batch_matvec_into
from kernels_numba.cpu.matvec.dispatch import MAX_BATCH_TOKENS
from kernels_numba.cpu.dequant import readonly_bytes

cpu, reference = get_ops("cpu"), get_ops("reference")


def batch_linear(x, w):
    """The batched float kernel itself (linear sends Q8_0/Q5_0/Q4_0 to int8_matvec on CPUs with VNNI)."""
    out = np.empty((x.shape[0], w.num_rows), np.float32)
    code = qt.type_code_of(w)
    batch_matvec_into(batch_kernel(code), readonly_bytes(w), x, out, parallel_policy.PARALLEL_MIN_WORK)
    return out


BATCH_TYPES = tuple(t for t, code in qt.TYPE_CODES.items() if code in BATCH_CODES)


def test_batch_types_are_the_quant_types_pair_decode_reads():
    assert set(BATCH_TYPES) == {QT.Q8_0, QT.Q5_0, QT.Q5_1, QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.Q5_K, QT.Q6_K}


@pytest.mark.parametrize("ggml_type", BATCH_TYPES, ids=lambda t: t.name)
def test_every_batch_size_matches_the_reference(ggml_type, threading_mode):
    # 2-4: one 4x4 tile; 5-8: 2x8 tiles; 9-12: both; 7 rows: a short final row group
    rng = np.random.default_rng(int(ggml_type))
    w = random_weight(ggml_type, (7, 512), rng)
    for num_tokens in range(2, MAX_BATCH_TOKENS + 1):
        x = rng.standard_normal((num_tokens, 512)).astype(np.float32)
        # float32 sums of 512 products in another order than float64: ~1e-7 relative
        assert relative_error(batch_linear(x, w), reference.linear(x, w)) < 1e-5, num_tokens


@pytest.mark.parametrize("num_tokens", [3, 8])
def test_odd_block_count_and_tiny_matrices(num_tokens, threading_mode):
    rng = np.random.default_rng(num_tokens)
    for num_rows in (1, 2, 3, 4, 5):
        for ggml_type, row_length in ((QT.Q8_0, 96), (QT.Q5_0, 32), (QT.Q4_0, 160)):  # 3, 1, 5 blocks
            w = random_weight(ggml_type, (num_rows, row_length), rng)
            x = rng.standard_normal((num_tokens, row_length)).astype(np.float32)
            assert relative_error(batch_linear(x, w), reference.linear(x, w)) < 1e-5


def test_each_token_row_equals_its_one_token_result():
    """Batching must not mix tokens: row t of a batch is (up to float32 rounding) token t alone."""
    rng = np.random.default_rng(3)
    w = random_weight(QT.Q6_K, (33, 256), rng)
    x = rng.standard_normal((9, 256)).astype(np.float32)
    batched = cpu.linear(x, w)
    for t in range(9):
        assert relative_error(batched[t], cpu.linear(x[t:t + 1], w)[0]) < 1e-5  # summation order only


def test_non_finite_activations_propagate():
    w = random_weight(QT.Q8_0, (4, 64), np.random.default_rng(0))
    x = np.ones((3, 64), np.float32)
    x[1, 5] = np.inf
    y = cpu.linear(x, w)
    assert np.isfinite(y[0]).all() and np.isfinite(y[2]).all() and not np.isfinite(y[1]).any()
