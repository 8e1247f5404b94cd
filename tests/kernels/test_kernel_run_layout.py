"""The run layout (run_layout.py) and its kernels: regrouped rows decode to the same floats as the GGUF rows, the
run dots match the numpy oracle of 8-bit activations, a token gets the same bits alone and in any batch, and a
mapped tensor is copied without touching its mapping."""
import itertools
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
import numba
from numba import njit

from gguf_loader.private_bytes import private_bytes
from kernels_numba.cpu.activation import GELU_TANH, SILU, apply_range
from kernels_numba.cpu.matvec import dispatch
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.dequant import decode_rows
from kernels_numba.cpu.ir import byte_dot
from kernels_numba.cpu.matvec.int8_dot import quantize_activations
from kernels_numba.cpu.matvec.run_dot import folded_lanes, row_range_intrinsic
from kernels_numba.cpu.matvec.run_layout import (RUN_CODES, RUN_VALUES, ZERO_POINTS, groups_of, repack, run_weights,
                                                 supports)
from kernels_numba.cpu.matvec.run_matvec import (PARALLEL_QUANTIZE_TOKENS, TOKEN_TILE, quantized_run_activations,
                                                 run_activations, shared_spans)
from kernels_numba.reference_int8 import linear_int8_activations
from tests.kernels.kernel_test_data import random_weight
from tests.kernels.resident_memory import resident_kib

pytestmark = pytest.mark.skipif(not dispatch.USE_RUN_LAYOUT, reason="the run layout needs integer dot instructions")


def q8_0(*shape):
    return pytest.param(QT.Q8_0, *shape)


# row lengths whose groups cover every width: 640 = 16 + 4 runs, 384 = 8 + 4, 896 = 16 + 8 + 4, 768 = 16 + 8,
# 576 = 16 + 2 (SmolLM2), 960 = 16 + 8 + 4 + 2, 64 = 2
SHAPES = [(QT.Q5_0, 9, 640), (QT.Q5_0, 6, 384), (QT.Q4_0, 7, 896), (QT.Q4_0, 5, 128), (QT.Q4_K, 6, 768),
          (QT.Q4_K, 5, 256), (QT.Q6_K, 7, 512), (QT.Q6_K, 3, 256), q8_0(9, 640), q8_0(5, 896), q8_0(3, 512),
          (QT.Q5_0, 5, 576), (QT.Q5_0, 3, 960), (QT.Q4_0, 6, 576), (QT.Q4_0, 3, 64), q8_0(7, 576), q8_0(3, 960),
          (QT.Q4_1, 7, 576), (QT.Q4_1, 5, 1536), (QT.Q4_1, 3, 960)]


def test_groups_cover_the_row_in_widths_16_8_4_2():
    assert groups_of(20) == [(0, 16), (16, 4)]
    assert groups_of(28) == [(0, 16), (16, 8), (24, 4)]
    assert groups_of(32) == [(0, 16), (16, 16)]
    assert groups_of(18) == [(0, 16), (16, 2)] and groups_of(30) == [(0, 16), (16, 8), (24, 4), (28, 2)]
    assert not supports(qt.Q5_0, 96) and supports(qt.Q5_0, 576) and not supports(qt.F16, 640)
    assert supports(qt.Q8_0, 640) and not supports(qt.Q8_0, 600)


@pytest.mark.parametrize("ggml_type, rows, k", SHAPES)
def test_regrouped_rows_decode_bit_for_bit_like_the_gguf_rows(ggml_type, rows, k):
    w = random_weight(ggml_type, (rows, k), np.random.default_rng(k + rows))
    code = qt.TYPE_CODES[ggml_type]
    packed = repack(code, np.asarray(w.data))
    assert packed.shape == w.data.shape
    row_ids = np.arange(rows, dtype=np.int64)
    expected, actual = np.empty((rows, k), np.float32), np.empty((rows, k), np.float32)
    decode_rows(code, np.asarray(w.data), row_ids, expected)
    decode_rows(run_weights(w).code, packed, row_ids, actual)
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("ggml_type, rows, k", SHAPES)
@pytest.mark.parametrize("num_tokens", [1, 4, 8, 13])
def test_run_dots_match_the_int8_oracle(ggml_type, rows, k, num_tokens):
    rng = np.random.default_rng(7 * k + num_tokens)
    w = random_weight(ggml_type, (rows, k), rng)
    x = rng.standard_normal((num_tokens, k)).astype(np.float32)
    runs = run_weights(w)
    out = np.empty((num_tokens, rows), np.float32)
    dispatch.linear_rows_into(runs.code, runs.data, x, out)
    expected = linear_int8_activations(x, w)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("ggml_type, k", [(QT.Q5_0, 512), (QT.Q5_0, 640), (QT.Q4_0, 384), (QT.Q4_K, 512),
                                          (QT.Q6_K, 512), q8_0(640), (QT.Q4_1, 576), q8_0(576), (QT.Q4_K, 4096)])
def test_a_token_gets_the_same_bits_alone_and_in_any_batch(ggml_type, k):
    """Every pass (8, 4, 2 and 1 tokens; over the whole span for decode batches, group by group past them), the
    folded tail groups of 4 runs (k = 640, 384) included; k = 4096: prefill passes of at most 4 tokens."""
    rng = np.random.default_rng(3)
    w = random_weight(ggml_type, (37, k), rng)  # 37 rows: a last row group of one
    runs = run_weights(w)
    x = rng.standard_normal((TOKEN_TILE + 9, k)).astype(np.float32)
    alone = np.empty((x.shape[0], 37), np.float32)
    for t in range(x.shape[0]):
        dispatch.linear_rows_into(runs.code, runs.data, x[t:t + 1], alone[t:t + 1])
    for num_tokens in (2, 4, 7, 8, 12, 16, x.shape[0]):  # passes of 8, 4 and 1; more than one token tile
        batch = np.empty((num_tokens, 37), np.float32)
        dispatch.linear_rows_into(runs.code, runs.data, x[:num_tokens], batch)
        np.testing.assert_array_equal(batch.view(np.uint32), alone[:num_tokens].view(np.uint32))


@pytest.mark.parametrize("num_tokens", [5, 9, 12])
def test_a_decode_batch_of_several_passes_sweeps_the_rows_in_pieces_with_each_tokens_bits(num_tokens):
    """A decode batch of more than one pass over rows of more than SWEEP_BYTES (here ~2.6 sweeps a span on one
    thread) runs every pass over one piece before the next: each token's bits are still its bits alone."""
    from kernels_numba.cpu.matvec.run_matvec import SWEEP_BYTES
    rng = np.random.default_rng(num_tokens)
    w = random_weight(QT.Q4_0, (1200, 576), rng)
    runs = run_weights(w)
    assert runs.data.nbytes > 2 * SWEEP_BYTES
    x = rng.standard_normal((num_tokens, 576)).astype(np.float32)
    alone = np.empty((num_tokens, 1200), np.float32)
    for t in range(num_tokens):
        dispatch.linear_rows_into(runs.code, runs.data, x[t:t + 1], alone[t:t + 1])
    threads = numba.get_num_threads()
    try:
        for pool in sorted({1, threads}):
            numba.set_num_threads(pool)
            batch = np.full((num_tokens, 1200), np.nan, np.float32)
            dispatch.linear_rows_into(runs.code, runs.data, x, batch)
            np.testing.assert_array_equal(batch.view(np.uint32), alone.view(np.uint32))
    finally:
        numba.set_num_threads(threads)


def test_linear_runs_on_the_layout_for_decodes_and_long_chunks():
    rng = np.random.default_rng(5)
    w = random_weight(QT.Q5_0, (48, 640), rng)
    for num_tokens in (1, 5, dispatch.MAX_RUN_TOKENS + 16):  # the last one: a prefill chunk, run dots too
        x = rng.standard_normal((num_tokens, 640)).astype(np.float32)
        expected = linear_int8_activations(x, w)
        np.testing.assert_allclose(dispatch.linear(x, w), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    assert w.cpu_layouts["runs"].code == qt.R_Q5_0
    odd = random_weight(QT.Q5_0, (8, 96), rng)  # 3 runs: no layout, the GGUF-order dots
    x = rng.standard_normal((2, 96)).astype(np.float32)
    np.testing.assert_allclose(dispatch.linear(x, odd), linear_int8_activations(x, odd), rtol=1e-4, atol=1e-4)
    assert odd.cpu_layouts["runs"] is None


@pytest.mark.parametrize("ggml_type, k", [(QT.Q5_0, 960), (QT.Q4_0, 896), (QT.Q4_1, 576), (QT.Q8_0, 640),
                                          (QT.Q4_K, 768), (QT.Q6_K, 512)])
@pytest.mark.parametrize("num_tokens", [1, 8])
def test_activations_quantized_into_the_run_layout_in_one_pass(ggml_type, k, num_tokens):
    """quantized_run_activations quantizes each block and stores its words at their places in one pass: the same
    four arrays as quantize_activations then run_activations, for every group width (k: 16 + 8 + 4 + 2 runs, ...),
    a zero block, blocks with an inf or a NaN (quants 0, scale NaN) and a strided x."""
    rng = np.random.default_rng(k + num_tokens)
    run_code = RUN_CODES[qt.TYPE_CODES[ggml_type]]
    wide = (rng.standard_normal((num_tokens, 2 * k)) * 3).astype(np.float32)
    wide[0, :64] = 0.0  # x[0, :32]: block 0 (x takes every other value)
    wide[-1, 2 * 37] = np.inf
    wide[-1, 2 * 100] = np.nan
    for x in (np.ascontiguousarray(wide[:, ::2]), wide[:, ::2]):
        quants, scales, _, _ = quantize_activations(x)
        expected = run_activations(run_code, quants, scales)
        actual = quantized_run_activations(run_code, x)
        for want, got in zip(expected, actual):
            np.testing.assert_array_equal(got, want)
        assert np.isnan(actual[1][-1]).sum() == 2 * (32 // RUN_VALUES[run_code])  # each run of the 2 blocks
        assert (actual[1][0] == 0).sum() == 32 // RUN_VALUES[run_code]  # the zero block's runs: scale 0


@pytest.mark.parametrize("ggml_type, k", [(QT.Q4_K, 768), (QT.Q6_K, 640)])
def test_prefill_activations_on_the_pool_give_the_serial_bits(ggml_type, k):
    """A prefill chunk's x is quantized and regrouped by the pool's threads, 4 tokens a claim (37: a last claim
    of one): the same four arrays as quantize_activations then run_activations on one thread."""
    rng = np.random.default_rng(k)
    run_code = RUN_CODES[qt.TYPE_CODES[ggml_type]]
    x = (rng.standard_normal((PARALLEL_QUANTIZE_TOKENS + 21, k)) * 3).astype(np.float32)
    quants, scales, _, _ = quantize_activations(x)
    serial = run_activations(run_code, quants, scales)
    threads = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        pooled = quantized_run_activations(run_code, x)
    finally:
        numba.set_num_threads(threads)
    for expected, actual in zip(serial, pooled):
        np.testing.assert_array_equal(actual, expected)


def test_private_bytes_copies_a_mapped_tensor_with_file_reads(tmp_path):
    payload = np.random.default_rng(1).integers(0, 256, 3 * 4096 + 100, dtype=np.uint8)
    path = tmp_path / "weights.bin"
    payload.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    view = mapped[4096 + 7:4096 + 7 + 2 * 1000].reshape(2, 1000)
    copy = private_bytes(view)
    assert copy.base is None and copy.flags.writeable and copy.shape == (2, 1000)
    np.testing.assert_array_equal(copy, payload[4096 + 7:4096 + 7 + 2000].reshape(2, 1000))
    if os.path.exists("/proc/self/smaps"):  # the mapping's pages were never faulted in
        assert resident_kib(str(path)) == 0
        int(view.sum())  # reading through the mapping does fault them in: the measure works
        assert resident_kib(str(path)) > 0
    plain = np.arange(10, dtype=np.uint8)[::2]  # not a mapping, not contiguous: an ordinary copy
    np.testing.assert_array_equal(private_bytes(plain), plain)


@pytest.mark.parametrize("num_tokens", [1, 4, 8, 13])
def test_shared_input_matvecs_give_each_matvecs_bits(num_tokens):
    """The decode layer's q/k/v (and gate/up) quantize their one input once and regroup it once per run code:
    the same bits as a mat-vec each, whatever mix of run, GGUF-order 8-bit and float types shares the input."""
    rng = np.random.default_rng(num_tokens)
    types = [QT.Q5_0, QT.Q5_0, QT.Q8_0, QT.Q4_K, QT.Q5_0, QT.F16]
    weights = [random_weight(t, (rows, 256), rng) for t, rows in zip(types, (24, 8, 8, 16, 12, 4))]
    codes, mats = zip(*(dispatch.cpu_operands(w) for w in weights))
    x = rng.standard_normal((num_tokens, 256)).astype(np.float32)
    outs = tuple(np.empty((num_tokens, m.shape[0]), np.float32) for m in mats)
    kernels = tuple(dispatch.linear_kernel(code, num_tokens) for code in codes)
    dispatch.shared_input_linear_into(kernels, mats, 1, x, outs[1:], True)
    float_only = np.empty_like(outs[-1])
    dispatch.shared_input_linear_into(kernels, mats, len(mats) - 1, x, (float_only,), True)  # F16: no 8-bit dot
    np.testing.assert_array_equal(float_only, outs[-1])
    for code, data, out in zip(codes[1:], mats[1:], outs[1:]):
        expected = np.empty_like(out)
        dispatch.linear_into(dispatch.linear_kernel(code, num_tokens), data, x, expected)
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("num_tokens", [1, 3])
@pytest.mark.parametrize("types_rows", [((QT.Q4_K, 256), (QT.Q4_K, 64), (QT.Q6_K, 64)),
                                        ((QT.Q4_K, 192), (QT.Q4_K, 192)), ((QT.Q5_0, 320),)])
def test_shared_run_region_gives_each_matvecs_bits(types_rows, num_tokens):
    """Run-path mat-vecs of one input in one parallel region (the threads take spans of every matrix's rows, in
    proportion to its bytes, from a shared counter): big enough to wake the pool, the same bits as one linear
    each (the Llama-3.2-1B mix of q/k/v, gate/up, one alone)."""
    rng = np.random.default_rng(num_tokens + len(types_rows))
    weights = [random_weight(t, (rows, 1024), rng) for t, rows in types_rows]
    codes, mats = zip(*(dispatch.cpu_operands(w) for w in weights))
    assert all(dispatch.choose_path(code, num_tokens) == dispatch.RUN for code in codes)
    x = rng.standard_normal((num_tokens, 1024)).astype(np.float32)
    kernels = tuple(dispatch.linear_kernel(code, num_tokens) for code in codes)
    for mixed_paths in (None, True):  # the run path's glue alone, and the general glue
        outs = tuple(np.full((num_tokens, m.shape[0]), np.nan, np.float32) for m in mats)
        dispatch.shared_input_linear_into(kernels, mats, 0, x, outs, mixed_paths)
        for kernel, data, out in zip(kernels, mats, outs):
            expected = np.empty_like(out)
            dispatch.linear_into(kernel, data, x, expected)
            np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("num_tokens", [1, 8, 13])
@pytest.mark.parametrize("gate_up_types", [(QT.Q4_1, QT.Q4_1), (QT.Q4_K, QT.Q4_K), (QT.Q4_K, QT.Q6_K)])
def test_gated_region_gives_the_matvecs_and_activation_bits(gate_up_types, num_tokens):
    """The feed-forward's gate and up in one region, each thread applying the activation to its own rows (one run
    code), or the shared-input mat-vecs then the activation (mixed types): the same bits as linear of each and
    apply_range over the whole, on one thread and on the pool, for SiLU and GELU, through the run path's glue alone
    (mixed_paths None) and through any path's."""
    rng = np.random.default_rng(num_tokens)
    weights = [random_weight(t, (1152, 1024), rng) for t in gate_up_types]
    codes, mats = zip(*(dispatch.cpu_operands(w) for w in weights))
    kernels = tuple(dispatch.linear_kernel(code, num_tokens) for code in codes)
    x = rng.standard_normal((num_tokens, 1024)).astype(np.float32)
    gate, up = (np.empty((num_tokens, 1152), np.float32) for _ in range(2))
    for kernel, data, out in zip(kernels, mats, (gate, up)):
        dispatch.linear_into(kernel, data, x, out)
    # None: the run path's glue alone (the decode layer's where every kernel is on the run path), True: any path's
    mixed_paths_values = (None, True) if all(kernel[0] == dispatch.RUN for kernel in kernels) else (True,)
    threads = numba.get_num_threads()
    try:
        for activation in (SILU, GELU_TANH):
            expected = np.empty_like(gate)
            apply_range(activation, gate.reshape(-1), up.reshape(-1), np.float32(0.0), expected.reshape(-1), 0,
                        gate.size)
            for pool, mixed_paths in itertools.product(sorted({1, threads}), mixed_paths_values):
                numba.set_num_threads(pool)
                gate_out, up_out = (np.full_like(gate, np.nan) for _ in range(2))
                dispatch.gated_linear_into(kernels, mats, 0, x, gate_out, up_out, activation, mixed_paths)
                np.testing.assert_array_equal(up_out, up)
                np.testing.assert_array_equal(gate_out, expected)
    finally:
        numba.set_num_threads(threads)


def test_shared_spans_cover_each_matrix_once():
    """Every row group of every matrix in exactly one span, spans in proportion to the matrices' bytes."""
    mats = (np.zeros((2048, 1152), np.uint8), np.zeros((512, 1152), np.uint8), np.zeros((512, 1680), np.uint8),
            np.zeros((6, 1152), np.uint8))
    for first, count in ((0, 3), (1, 2), (3, 1), (0, 4)):
        spans = shared_spans(mats, first, count, 16)
        for m in range(count):
            mine = spans[spans[:, 0] == m]
            groups = -(-mats[first + m].shape[0] // 4)
            assert mine[0, 1] == 0 and mine[-1, 2] == groups and (mine[1:, 1] == mine[:-1, 2]).all()
    assert np.bincount(shared_spans(mats, 0, 3, 16)[:, 0]).tolist() == [10, 2, 4]


KINDS_HERE = byte_dot.TARGET_KINDS


def _run_dots(run_code, num_tokens, kind):
    """An uncached njit of the run dots of every row with the lane dot of `kind`."""
    dots = row_range_intrinsic(run_code, num_tokens, kind)

    @njit
    def rows_into(data, x_quants, x_scales, x_starts, x_sums, out):
        dots(data, 0, data.shape[0], x_quants, x_scales, x_starts, x_sums, 0, out, 0)
    return rows_into


@pytest.mark.parametrize("ggml_type, k", [(QT.Q5_0, 640), (QT.Q4_0, 896), (QT.Q4_K, 768), (QT.Q6_K, 512),
                                          (QT.Q8_0, 640), (QT.Q8_0, 896), (QT.Q5_0, 960), (QT.Q8_0, 576),
                                          (QT.Q4_1, 960)])
@pytest.mark.parametrize("kind", [kind for kind in KINDS_HERE if kind != byte_dot.PORTABLE])
def test_every_lane_dot_kind_gives_the_portable_run_dots(ggml_type, k, kind):
    """Full, narrow and folded groups (640 = 16 + 4 runs, 896 = 16 + 8 + 4, 960 = 16 + 8 + 4 + 2), Q8_0's signed weights under
    vpmaddubsw included: the same integers as the plain IR, with one token and with a pass of 4."""
    rng = np.random.default_rng(k)
    code = qt.TYPE_CODES[ggml_type]
    w = random_weight(ggml_type, (9, k), rng)
    data, run_code = repack(code, np.asarray(w.data)), RUN_CODES[code]
    for num_tokens in (1, 4):
        quants, scales, _, _ = quantize_activations(
            (rng.standard_normal((num_tokens, k)) * 4).astype(np.float32))
        xr = run_activations(run_code, quants, scales)
        portable, fast = (np.empty((num_tokens, 9), np.float32) for _ in range(2))
        _run_dots(run_code, num_tokens, byte_dot.PORTABLE)(data, *xr, portable)
        _run_dots(run_code, num_tokens, kind)(data, *xr, fast)
        if (byte_dot.byte_dot(kind, ZERO_POINTS[run_code]).uses_starts
                and folded_lanes(kind) == folded_lanes(byte_dot.PORTABLE)):
            np.testing.assert_array_equal(fast.view(np.uint32), portable.view(np.uint32))
        else:  # the zero point leaves every lane, not the first 4 of a folded group, or a folded group's dots go
            # through a different number of float lanes: float rounding differs
            np.testing.assert_allclose(fast, portable, rtol=1e-5, atol=1e-5 * np.abs(portable).max())


def test_q8_0_repack_is_a_leaf_job_compiled_with_the_signature_repack_uses():
    """Where Q8_0 takes the run layout (the tiers with 8-bit dots), its row gather is one of the model's leaf jobs
    (a tier compiled from another tier's recording, as the build makes them, would otherwise compile it on first
    use), compiled for exactly the types repack calls it with."""
    from kernels_numba.cpu.matvec import run_layout
    w = random_weight(QT.Q8_0, (64, 576), np.random.default_rng(7))
    jobs = dispatch.leaf_jobs([w], max_num_tokens=8)
    repack_job = dispatch.LeafJob(dispatch.REPACK_ROWS, qt.Q8_0)
    assert (repack_job in jobs) == (dispatch.kernel_code(w) == qt.R_Q8_0)
    dispatch.compile_leaf(repack_job)
    compiled = set(run_layout._gather_rows_into.signatures)
    assert run_layout.GATHER_SIGNATURE in compiled
    run_layout.repack(qt.Q8_0, np.asarray(w.data).view(np.uint8).reshape(64, -1))
    assert set(run_layout._gather_rows_into.signatures) == compiled
