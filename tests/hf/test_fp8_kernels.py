"""The numba FP8 E4M3 kernels (kernels_numba/cpu/fp8*.py) against the numpy oracle (kernels_numba/reference_fp8)."""
import platform
import re
import tracemalloc

import numpy as np
import pytest

from gguf_loader.fp8_layout import E4M3_TABLE, FP8_STORAGE_TYPE, make_fp8_scales
from gguf_loader.weight_tensor import WeightTensor, make_weight_tensor
from kernels_numba import reference_fp8

cpu_fp8 = pytest.importorskip("kernels_numba.cpu.matvec.fp8")
TOLERANCE = 2e-6  # max |error| / max |oracle|: float32 sums of up to 512 products against float64 (measured ~5e-7)
LAYOUTS = {  # name -> (rows, cols, block size or None); each takes a different path through the kernels
    "block128": (260, 512, (128, 128)),  # fused kernel, 4 scale columns, partial last row block
    "block32": (67, 96, (32, 32)),  # fused kernel, short final row group
    "channel": (301, 256, None),  # fused kernel, per-row scale applied to each row's total
    "tensor": (9, 64, None),
    "odd_block": (70, 96, (32, 40)),  # blocks that split 32-column chunks: the table path for every n
    "rows_of_3": (64, 96, (3, 32)),  # row blocks that split groups of four rows: the table path
}


@pytest.fixture(params=["serial", "parallel"])
def threading_mode(request, monkeypatch):
    """Every kernel on the calling thread, then every kernel on numba's pool (as tests/kernels/conftest.py)."""
    from kernels_numba.cpu import parallel_policy

    monkeypatch.setattr(parallel_policy, "PARALLEL_MIN_WORK", 0 if request.param == "parallel" else 1 << 62)
    return request.param


def fp8_weight(layout: str, rng: np.random.Generator) -> WeightTensor:
    """A random FP8 weight: every E4M3 code but the NaNs (so subnormals too), scales of varied size."""
    rows, cols, block = LAYOUTS[layout]
    codes = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C
    if layout == "channel":
        scales = rng.uniform(1e-4, 1e-2, (rows, 1))
    elif layout == "tensor":
        scales = np.array(3e-3)
    else:
        scales = rng.uniform(1e-4, 1e-2, (-(-rows // block[0]), -(-cols // block[1])))
    fp8 = make_fp8_scales("w", scales.astype(np.float32), (rows, cols), block)
    tensor = make_weight_tensor("w", FP8_STORAGE_TYPE, (rows, cols), codes)
    return WeightTensor(tensor.name, tensor.ggml_type, tensor.shape, tensor.data, fp8=fp8)


def normalized_error(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_linear_matches_the_oracle_for_every_token_count(layout, threading_mode):
    rng = np.random.default_rng(len(layout))
    w = fp8_weight(layout, rng)
    for num_tokens in (1, 2, 3, 4, 7, 12, 13, 37):
        x = rng.standard_normal((num_tokens, w.row_length)).astype(np.float32)
        y = cpu_fp8.fp8_linear(x, w)
        assert y.shape == (num_tokens, w.num_rows) and y.dtype == np.float32
        assert normalized_error(y, reference_fp8.fp8_linear(x, w)) < TOLERANCE, (layout, num_tokens)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dequantized_rows_equal_the_oracle(layout):
    rng = np.random.default_rng(7)
    w = fp8_weight(layout, rng)
    rows = np.array([0, w.num_rows - 1, 5 % w.num_rows, 3 % w.num_rows])
    np.testing.assert_array_equal(cpu_fp8.fp8_dequantize_rows(w, rows), reference_fp8.fp8_dequantize_rows(w, rows))
    strided = np.zeros((rows.size, 2 * w.row_length), np.float32)[:, ::2]
    cpu_fp8.fp8_dequantize_rows(w, rows, out=strided)
    np.testing.assert_array_equal(strided, reference_fp8.fp8_dequantize_rows(w, rows))
    with pytest.raises(IndexError):
        cpu_fp8.fp8_dequantize_rows(w, np.array([w.num_rows]))


def test_every_finite_code_decodes_exactly():
    """Each E4M3 byte (subnormals, zeros, both signs) through the fused kernel: one-hot x picks one column."""
    codes = np.arange(256, dtype=np.uint8).reshape(8, 32)
    codes[(codes & 0x7F) == 0x7F] = 0
    fp8 = make_fp8_scales("w", np.ones((8, 1), np.float32), (8, 32), None)
    tensor = make_weight_tensor("w", FP8_STORAGE_TYPE, (8, 32), codes)
    w = WeightTensor("w", tensor.ggml_type, tensor.shape, tensor.data, fp8=fp8)
    for column in range(32):
        x = np.zeros((1, 32), np.float32)
        x[0, column] = 1.0
        np.testing.assert_array_equal(cpu_fp8.fp8_linear(x, w)[0], E4M3_TABLE[codes[:, column]])


@pytest.mark.parametrize("layout", ["block128", "channel", "odd_block"])  # fused, per-row scale, table path
def test_nan_codes_make_nan_in_every_path(layout, threading_mode):
    """E4M3 0x7f / 0xff are NaN (no infinities in E4M3fn): a row holding one gives NaN, the other rows stay
    finite, for every token count (fused kernel, tiles) and in decoded rows, as in the oracle."""
    rng = np.random.default_rng(11)
    w = fp8_weight(layout, rng)
    codes = np.asarray(w.data)
    codes[1, 17], codes[w.num_rows - 1, w.row_length - 1] = 0x7F, 0xFF
    nan_rows = np.isin(np.arange(w.num_rows), [1, w.num_rows - 1])
    for num_tokens in (1, 3, 8, 20):
        x = rng.standard_normal((num_tokens, w.row_length)).astype(np.float32)
        for y in (cpu_fp8.fp8_linear(x, w), reference_fp8.fp8_linear(x, w)):
            np.testing.assert_array_equal(np.isnan(y), np.broadcast_to(nan_rows, y.shape))
    rows = np.array([0, 1, w.num_rows - 1])
    decoded = cpu_fp8.fp8_dequantize_rows(w, rows)
    np.testing.assert_array_equal(decoded, reference_fp8.fp8_dequantize_rows(w, rows))  # NaN == NaN here
    assert np.isnan(decoded[1, 17]) and np.isnan(decoded[2, -1]) and np.isnan(decoded).sum() == 2


def test_linear_writes_into_out_and_never_writes_the_weight():
    rng = np.random.default_rng(3)
    w = fp8_weight("block128", rng)
    before = np.array(w.data)
    x = rng.standard_normal((3, w.row_length)).astype(np.float32)
    out = np.full((3, w.num_rows), np.nan, np.float32)
    assert cpu_fp8.fp8_linear(x, w, out=out) is out
    assert normalized_error(out, reference_fp8.fp8_linear(x, w)) < TOLERANCE
    cpu_fp8.fp8_linear(rng.standard_normal((20, w.row_length)).astype(np.float32), w)
    np.testing.assert_array_equal(np.asarray(w.data), before)
    with pytest.raises(ValueError, match="x has shape"):
        cpu_fp8.fp8_linear(np.zeros((1, 7), np.float32), w)
    with pytest.raises(ValueError, match="out must be"):
        cpu_fp8.fp8_linear(x, w, out=np.zeros((3, 5), np.float32))


def test_prefill_holds_one_tile_not_a_float32_copy_of_the_weight():
    """Peak numpy allocation of a 40-token linear stays far below the weight's float32 size (4 bytes/weight)."""
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 0x7F, (2048, 1024), dtype=np.uint8)
    fp8 = make_fp8_scales("w", np.full((16, 8), 1e-3, np.float32), codes.shape, (128, 128))
    tensor = make_weight_tensor("w", FP8_STORAGE_TYPE, codes.shape, codes)
    w = WeightTensor("w", tensor.ggml_type, tensor.shape, tensor.data, fp8=fp8)
    x = rng.standard_normal((40, 1024)).astype(np.float32)
    for num_tokens in (40, 1):
        cpu_fp8.fp8_linear(x[:num_tokens], w)  # compiled, tile buffer allocated
        tracemalloc.start()
        cpu_fp8.fp8_linear(x[:num_tokens], w)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 4 * w.nbytes / 8, (num_tokens, peak)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction names")
def test_fused_kernel_is_vector_code():
    """The decode compiles to vcvtph2ps and packed FMAs, not gathers or scalar converts (inspect_asm)."""
    import numba

    from kernels_numba.cpu.matvec import fp8_dot
    from kernels_numba.cpu.jit_options import SUM_FASTMATH

    from llvmlite import binding

    if "+f16c" not in binding.get_host_cpu_features().flatten():
        pytest.skip("no F16C on this CPU")
    fresh = numba.njit(fastmath=SUM_FASTMATH)(fp8_dot.fp8_groups_into.py_func)  # uncached: its assembly can be read
    data = np.zeros((4, 64), np.uint8)
    fresh(data, np.ones((1, 1), np.float32), 4, 64, 0, 1, np.ones((3, 64), np.float32), np.empty((3, 4), np.float32))
    asm = next(iter(fresh.inspect_asm().values()))
    assert "gather" not in asm
    assert len(re.findall(r"vcvtph2ps\w*\s+%xmm\d+, %ymm|vcvtph2ps\w*\s+%ymm\d+, %zmm", asm)) >= 8
    assert re.search(r"vfmadd\w+\s+[^\n]*%[yz]mm", asm)
