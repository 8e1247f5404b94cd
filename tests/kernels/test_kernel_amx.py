"""The AMX tile mat-vec (amx_tiles / amx_dot / amx_matvec) against the int8 oracle (reference_int8)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from numba import njit

from kernel_test_data import random_weight, relative_error
from kernels_numba.cpu.matvec import amx_matvec, int8_dot, quant_type
from kernels_numba.cpu.ir.amx_tiles import AMX_IS_AVAILABLE
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.cpu.matvec import dispatch
from kernels_numba.reference_int8 import linear_int8_activations

needs_amx = pytest.mark.skipif(not AMX_IS_AVAILABLE, reason="no AMX on this CPU (or the OS refused the tile state)")


def _amx_dots(w, x):
    n, k = x.shape
    quants, scales = np.empty((n, k), np.int8), np.empty((n, k // 32), np.float32)
    int8_dot.quantize_activations_into(x, quants, scales, np.empty((n, k // 4), np.int32),
                                       np.empty((n, k // 32), np.float32))
    out = np.full((n, w.shape[0]), np.nan, np.float32)
    amx_matvec.amx_matvec_into(readonly_bytes(w), quants, scales, out)
    return out


def test_activation_tiles_hold_four_quants_of_each_token_side_by_side():
    quants = np.random.default_rng(0).integers(-128, 128, (4, 64), dtype=np.int8)
    tiles = amx_matvec.vnni_activations(quants, 1, 3)  # 3 tokens: a tile 4 tokens wide, the last one zero
    padded = np.concatenate([quants[1:4], np.zeros((1, 64), np.int8)])
    np.testing.assert_array_equal(tiles, padded.reshape(4, 2, 8, 4).transpose(1, 2, 0, 3).reshape(2, 8, 16))


@needs_amx
@pytest.mark.parametrize("num_rows", [5, 16, 300])  # a short tile, one full tile, many with a short last one
@pytest.mark.parametrize("num_tokens", [1, 2, 3, 7, 16, 21])  # every tile width; 21: a pass of 16 and one of 5
def test_tile_dots_match_the_int8_reference(num_rows, num_tokens, threading_mode):
    rng = np.random.default_rng(num_rows + num_tokens)
    w = random_weight(QT.Q8_0, (num_rows, 352), rng)  # 11 blocks: a pair loop and a last single block
    x = rng.standard_normal((num_tokens, 352)).astype(np.float32)
    assert relative_error(_amx_dots(w, x), linear_int8_activations(x, w)) < 1e-5


@needs_amx
def test_a_token_gets_the_same_bits_alone_and_inside_a_batch():
    rng = np.random.default_rng(1)
    w = random_weight(QT.Q8_0, (37, 256), rng)
    x = rng.standard_normal((19, 256)).astype(np.float32)
    batch, three = _amx_dots(w, x), _amx_dots(w, x[:3])  # tile widths 16 + 4, and 4
    for t in range(19):
        np.testing.assert_array_equal(_amx_dots(w, x[t:t + 1])[0], batch[t])
    np.testing.assert_array_equal(three, batch[:3])


@needs_amx
def test_non_finite_activations_propagate():
    rng = np.random.default_rng(2)
    w = random_weight(QT.Q8_0, (20, 64), rng)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[0, 3], x[2, 60] = np.nan, np.inf
    out = _amx_dots(w, x)
    assert np.isnan(out[[0, 2]]).all() and np.isfinite(out[1]).all()


@needs_amx
def test_linear_sends_q8_0_to_the_tiles():
    assert amx_matvec.uses_amx(quant_type.Q8_0) and not amx_matvec.uses_amx(quant_type.Q5_0)
    rng = np.random.default_rng(3)
    w = random_weight(QT.Q8_0, (40, 128), rng)
    x = rng.standard_normal((5, 128)).astype(np.float32)
    out = np.empty((5, 40), np.float32)
    assert dispatch.choose_path(quant_type.Q8_0, 5) == dispatch.AMX
    dispatch.linear_rows_into(quant_type.Q8_0, readonly_bytes(w), x, out)
    np.testing.assert_array_equal(out, _amx_dots(w, x))
    groups_into = njit(amx_matvec._groups_into.py_func)  # uncached: its assembly can be read
    quants = np.zeros((1, 128), np.int8)
    groups_into(readonly_bytes(w), amx_matvec.vnni_activations(quants, 0, 1),
                amx_matvec.padded_block_scales(np.ones((1, 4), np.float32), 0, 1), out, 0, 1, 0, 1)
    assert "tdpbssd" in groups_into.inspect_asm(groups_into.signatures[0])


@pytest.mark.skipif(AMX_IS_AVAILABLE, reason="this CPU has AMX")
def test_without_amx_q8_0_takes_the_vnni_dots_and_the_tile_path_refuses_to_run():
    """The tile kernels still compile (to nothing) where LLVM cannot select AMX, so Q8_0 mat-vecs work."""
    assert not amx_matvec.uses_amx(quant_type.Q8_0)
    rng = np.random.default_rng(4)
    w = random_weight(QT.Q8_0, (40, 128), rng)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    out = np.empty((3, 40), np.float32)
    with dispatch.forced_path("int8"):
        dispatch.linear_rows_into(quant_type.Q8_0, readonly_bytes(w), x, out)
    assert relative_error(out, linear_int8_activations(x, w)) < 1e-5
    with pytest.raises(RuntimeError, match="AMX"):
        _amx_dots(w, x)
