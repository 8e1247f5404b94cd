"""The threaded prefill mat-mul: numpy's sgemm called from numba threads (blas.py, tile_gemm.py)."""
import numba
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernel_test_data import random_weight, relative_error
from kernels_numba import get_ops
from kernels_numba.cpu.matvec import blas, dispatch, quant_type
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.cpu.matvec.tile_gemm import tiled_kernel, tiled_matmul_into

reference = get_ops("reference")
OPENBLAS = blas.loaded_openblas()
SGEMM = OPENBLAS.sgemm if OPENBLAS else None
needs_sgemm = pytest.mark.skipif(OPENBLAS is None, reason="numpy is not on OpenBLAS here")


@pytest.fixture
def single_threaded_openblas():
    """OpenBLAS at one thread, as `pocket` runs it (pytest loads numpy before pocketcli can set the variable)."""
    before = OPENBLAS.get_num_threads()
    OPENBLAS.set_num_threads(1)
    yield
    OPENBLAS.set_num_threads(before)


def test_numpy_wheels_openblas_is_found():
    if "openblas" not in str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]).lower():
        pytest.skip("numpy is not built on OpenBLAS")
    assert OPENBLAS is not None and SGEMM.address


@needs_sgemm
def test_sgemm_writes_only_its_column_window():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((3, 7)).astype(np.float32)
    c = np.full((5, 9), 7.0, np.float32)

    @numba.njit
    def call(address, a, b, c):
        blas.sgemm_with_int_width(address, True, blas.TRANS, 5, 3, 7, a.ctypes.data, 7, b.ctypes.data, 7,
                                  np.float32(0.0), c.ctypes.data + 4 * 4, 9)

    assert SGEMM.ilp64  # numpy >= 1.22 wheels: 64-bit OpenBLAS interface
    call(SGEMM.address, a, b, c)
    np.testing.assert_allclose(c[:, 4:7], a @ b.T, rtol=1e-6)
    assert (c[:, :4] == 7).all() and (c[:, 7:] == 7).all()


@needs_sgemm
@pytest.mark.parametrize("ggml_type", [QT.Q5_0, QT.Q4_K, QT.Q6_K, QT.Q8_0, QT.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_tiled_parallel_matmul_matches_the_dequantized_product(ggml_type, chunks):
    rng = np.random.default_rng(int(ggml_type) + chunks)
    w = random_weight(ggml_type, (37, 256), rng)  # 37 rows: chunks and 5-row tiles end mid-tile
    x = rng.standard_normal((19, 256)).astype(np.float32)
    out = np.full((19, 37), np.nan, np.float32)
    code = quant_type.type_code_of(w)
    tiled_matmul_into(tiled_kernel(code), readonly_bytes(w), x, out, 5, SGEMM.address, bool(SGEMM.ilp64),
                      chunks)
    expected = x.astype(np.float64) @ reference.dequantize(w).astype(np.float64).T
    assert relative_error(out, expected) < 1e-5


@needs_sgemm
def test_linear_takes_the_threaded_path_for_prompts(monkeypatch, threading_mode, single_threaded_openblas):
    calls = []
    monkeypatch.setattr(dispatch, "tiled_matmul_into", lambda *a: calls.append(a) or tiled_matmul_into(*a))
    rng = np.random.default_rng(3)
    w = random_weight(QT.Q5_1, (64, 128), rng)  # no run layout (whose dots serve prompts too), no 8-bit dots
    x = rng.standard_normal((65, 128)).astype(np.float32)  # past the fused paths and PARALLEL_MIN_WORK
    assert dispatch.choose_path(dispatch.cpu_operands(w)[0], x.shape[0]) == dispatch.TILED
    y = get_ops("cpu").linear(x, w)
    assert relative_error(y, x.astype(np.float64) @ reference.dequantize(w).astype(np.float64).T) < 1e-5
    assert len(calls) == (1 if threading_mode == "parallel" and numba.get_num_threads() > 1 else 0)


@needs_sgemm
def test_a_multithreaded_openblas_is_not_used_from_numba_threads(single_threaded_openblas):
    assert blas.find_sgemm() == SGEMM
    OPENBLAS.set_num_threads(2)
    assert blas.find_sgemm() is None
