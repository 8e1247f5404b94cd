"""The linear dispatch table (matvec/dispatch.py): every path forced on the types it serves matches the numpy
reference, the table picks what its thresholds say, and leaf kernels are reached only through checked handles."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from numba import njit, types

from kernel_test_data import random_weight, relative_error
from kernels_numba import get_ops
from kernels_numba.cpu.ir.amx_tiles import AMX_IS_AVAILABLE
from kernels_numba.cpu.ir.native_call import NO_KERNEL, call_native, native_kernel
from kernels_numba.cpu.matvec import dispatch
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.int8_dot import round_activations
from kernels_numba.reference_int8 import linear_int8_activations

reference = get_ops("reference")
needs_8bit = pytest.mark.skipif(not dispatch.USE_INT8_DOT, reason="the 8-bit dots need AVX512-VNNI")


def float64_linear(x, w):
    return x.astype(np.float64) @ reference.dequantize(w).astype(np.float64).T


def tiled_linear(x, w):
    """The tiled path multiplies activations rounded to the 8-bit grid where the type has 8-bit dots."""
    if dispatch.rounds_activations(qt.type_code_of(w)):
        x = round_activations(x)
    return float64_linear(x, w)


def forced_linear(path, x, w):
    out = np.full((x.shape[0], w.num_rows), np.nan, np.float32)
    code, data = dispatch.cpu_operands(w)
    with dispatch.forced_path(path):
        dispatch.linear_rows_into(code, data, np.ascontiguousarray(x), out)
    return out


# (path, weight types, token counts, oracle): one case per path and a few types each (every type of a path is
# covered by the linear tests through the unforced table)
CASES = [
    ("fused", (QT.Q4_K, QT.Q6_K, QT.Q8_0, QT.F16), (1, 3), float64_linear),
    ("batch", (QT.Q5_0, QT.Q4_K, QT.Q6_K), (2, 7, 12), float64_linear),
    ("tiled", (QT.Q4_K, QT.Q8_0, QT.F16), (3, 70), tiled_linear),
    ("f32_blas", (QT.F32,), (1, 5), float64_linear),
    pytest.param("int8", (QT.Q8_0, QT.Q4_K, QT.Q6_K), (1, 6), linear_int8_activations, marks=needs_8bit),
]


@pytest.mark.parametrize("path, ggml_types, token_counts, oracle", CASES, ids=lambda c: c if isinstance(c, str) else "")
def test_each_forced_path_matches_its_reference(path, ggml_types, token_counts, oracle):
    rng = np.random.default_rng(len(path))
    for ggml_type in ggml_types:
        w = random_weight(ggml_type, (37, 256), rng)
        w.cpu_layouts["runs"] = None  # the GGUF rows (the run path has its own case below)
        for num_tokens in token_counts:
            x = rng.standard_normal((num_tokens, 256)).astype(np.float32)
            assert relative_error(forced_linear(path, x, w), oracle(x, w)) < 1e-4, (ggml_type, num_tokens)


@needs_8bit
@pytest.mark.parametrize("ggml_type", [QT.Q5_0, QT.Q4_K, QT.Q6_K, QT.Q4_0])
def test_the_forced_run_path_matches_the_8bit_reference(ggml_type):
    rng = np.random.default_rng(9)
    w = random_weight(ggml_type, (21, 512), rng)
    assert dispatch.cpu_operands(w)[0] >= qt.R_Q5_0
    for num_tokens in (1, 9, 20):
        x = rng.standard_normal((num_tokens, 512)).astype(np.float32)
        assert relative_error(forced_linear("run", x, w), linear_int8_activations(x, w)) < 1e-4


@pytest.mark.skipif(not AMX_IS_AVAILABLE, reason="this CPU has no AMX")
def test_the_forced_amx_path_matches_the_8bit_reference():
    """AMX serves the Q8_0 rows that have no run layout (288 values: not a multiple of 64)."""
    rng = np.random.default_rng(10)
    w = random_weight(QT.Q8_0, (40, 288), rng)
    assert dispatch.kernel_code(w) == qt.Q8_0
    x = rng.standard_normal((5, 288)).astype(np.float32)
    assert relative_error(forced_linear("amx", x, w), linear_int8_activations(x, w)) < 1e-4


def test_the_table_follows_its_thresholds():
    choose = dispatch.choose_path
    assert choose(qt.F32, 1) == dispatch.F32_BLAS
    assert choose(qt.Q5_1, 1) == dispatch.FUSED and choose(qt.Q5_1, 5) == dispatch.BATCH
    assert choose(qt.IQ4_NL, 5) == dispatch.FUSED and choose(qt.IQ4_NL, dispatch.MAX_FUSED_TOKENS + 1) == dispatch.TILED
    assert choose(qt.Q5_1, dispatch.MAX_BATCH_TOKENS + 1) == dispatch.TILED
    assert choose(qt.R_Q5_0, dispatch.MAX_RUN_TOKENS) == dispatch.RUN
    assert choose(qt.R_Q5_0, 512) == dispatch.RUN  # prefill chunks too: the run dots beat tile decode + BLAS
    if dispatch.USE_INT8_DOT:
        assert choose(qt.Q4_K, dispatch.MAX_INT8_TOKENS) in (dispatch.INT8, dispatch.AMX)
        assert choose(qt.Q8_0, 1) == (dispatch.AMX if AMX_IS_AVAILABLE else dispatch.INT8)
    else:  # the generic tier: float kernels for every type
        assert choose(qt.Q4_K, 1) == dispatch.FUSED and choose(qt.Q8_0, 3) == dispatch.BATCH
    with dispatch.forced_path("tiled"):
        assert choose(qt.Q4_K, 1) == dispatch.TILED
    with dispatch.forced_path("f32_blas"), pytest.raises(ValueError, match="cannot run"):
        choose(qt.Q4_K, 1)  # a path that cannot read the type is refused, not run on the wrong bytes


def test_a_model_compiles_the_leaves_of_its_own_types_only():
    rng = np.random.default_rng(11)
    w = random_weight(QT.Q5_1, (8, 256), rng)
    dispatch.linear(rng.standard_normal((1, 256)).astype(np.float32), w)
    dispatch.linear(rng.standard_normal((1, 256)).astype(np.float32), w)  # made once
    assert _LEAF_CALLS == [(dispatch.FUSED, qt.Q5_1)]


_LEAF_CALLS = []


@pytest.fixture(autouse=True)
def _record_leaf_calls(monkeypatch):
    """Records which (path, code) leaves get made; starts each test with none made."""
    original = dispatch._LEAVES.copy()
    _LEAF_CALLS.clear()
    dispatch.leaf_handles.cache_clear()

    def recording(path, make):
        def make_recorded(code):
            _LEAF_CALLS.append((path, code))
            return make(code)
        return make_recorded

    monkeypatch.setattr(dispatch, "_LEAVES", {path: recording(path, make) for path, make in original.items()})
    yield
    dispatch.leaf_handles.cache_clear()


@njit(cache=False)
def _add_into(value, out):
    out[0] += value


@njit(cache=False)
def _call(handle, value, out):
    call_native(handle, (value, out))


def test_a_handle_for_other_argument_types_raises_instead_of_running():
    out = np.zeros(1, np.float64)
    handle = native_kernel(_add_into, (types.float64, types.Array(types.float64, 1, "C")))
    _call(handle, 2.0, out)
    assert out[0] == 2.0
    with pytest.raises(TypeError, match="other argument types"):
        _call(handle, np.int64(2), out)  # an int64 value: not the float64 the leaf was compiled for
    with pytest.raises(TypeError, match="other argument types"):
        _call(NO_KERNEL, 2.0, out)
    assert out[0] == 2.0


def test_leaf_jobs_name_the_leaves_a_model_compiles():
    rng = np.random.default_rng(12)
    weights = [random_weight(QT.Q5_1, (8, 256), rng), random_weight(QT.IQ4_NL, (8, 256), rng)]
    jobs = dispatch.leaf_jobs(weights, max_num_tokens=8)
    assert dispatch.LeafJob(dispatch.FUSED, qt.Q5_1) in jobs and dispatch.LeafJob(dispatch.BATCH, qt.Q5_1) in jobs
    assert dispatch.LeafJob(dispatch.FUSED, qt.IQ4_NL) in jobs
    assert not any(job.path == dispatch.TILED for job in jobs)  # 8 tokens: no prefill past the fused paths
    for job in jobs:
        dispatch.compile_leaf(job)
    assert sorted(set(_LEAF_CALLS)) == sorted((job.path, job.code) for job in jobs)
