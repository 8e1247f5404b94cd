import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from gguf_loader.weight_tensor import make_weight_tensor
from kernels_numba import get_ops
from kernels_numba.iq_tables import IQ2_XXS_GRID, IQ3_XXS_GRID, IQ4_NL_LEVELS, KSIGNS, SIGN_VALUES

# the first entries of llama.cpp's ggml-common.h tables, one little-endian byte per value
LLAMA_CPP_IQ2XXS_GRID_HEAD = (
    0x0808080808080808, 0x080808080808082b, 0x0808080808081919, 0x0808080808082b08, 0x0808080808082b2b,
    0x0808080808190819, 0x0808080808191908, 0x08080808082b0808, 0x08080808082b082b, 0x08080808082b2b08,
    0x08080808082b2b2b, 0x0808080819080819, 0x0808080819081908, 0x0808080819190808, 0x0808080819192b08,
    0x08080808192b0819, 0x08080808192b1908,
)
LLAMA_CPP_IQ3XXS_GRID_HEAD = (
    0x04040404, 0x04040414, 0x04040424, 0x04040c0c, 0x04040c1c, 0x04040c3e, 0x04041404, 0x04041414, 0x04041c0c,
    0x04042414, 0x04043e1c, 0x04043e2c, 0x040c040c, 0x040c041c, 0x040c0c04, 0x040c0c14, 0x040c140c, 0x040c142c,
    0x040c1c04, 0x040c1c14, 0x040c240c, 0x040c2c24, 0x040c3e04,
)


def packed_bytes(entries, width: int) -> np.ndarray:
    return np.array([[(e >> (8 * i)) & 0xFF for i in range(width)] for e in entries], dtype=np.float32)


def test_grids_match_llama_cpp():
    head = LLAMA_CPP_IQ2XXS_GRID_HEAD
    np.testing.assert_array_equal(IQ2_XXS_GRID[:len(head)], packed_bytes(head, 8))
    head = LLAMA_CPP_IQ3XXS_GRID_HEAD
    np.testing.assert_array_equal(IQ3_XXS_GRID[:len(head)], packed_bytes(head, 4))
    assert IQ2_XXS_GRID.shape == (256, 8) and set(np.unique(IQ2_XXS_GRID)) == {8, 25, 43}
    assert IQ3_XXS_GRID.shape == (256, 4) and set(np.unique(IQ3_XXS_GRID)) == {4, 12, 20, 28, 36, 44, 52, 62}


def test_sign_table_has_an_even_number_of_minus_signs_and_matches_gguf():
    np.testing.assert_array_equal(KSIGNS, np.frombuffer(gguf.quants.IQ2_XXS.ksigns, dtype=np.uint8))
    assert ((SIGN_VALUES < 0).sum(axis=-1) % 2 == 0).all()
    np.testing.assert_array_equal(SIGN_VALUES[3], [-1, -1, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(SIGN_VALUES[1], [-1, 1, 1, 1, 1, 1, 1, -1])  # the 8th sign restores parity


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_iq4_nl_block_by_hand(backend):
    block = np.zeros(18, np.uint8)
    block[0:2] = np.array([0.5], np.float16).view(np.uint8)
    block[2:18] = np.arange(16, dtype=np.uint8) | (np.arange(16, dtype=np.uint8)[::-1] << 4)
    w = make_weight_tensor("w", QT.IQ4_NL, (1, 32), block)
    expected = 0.5 * np.concatenate([IQ4_NL_LEVELS, IQ4_NL_LEVELS[::-1]])
    np.testing.assert_array_equal(get_ops(backend).dequantize(w)[0], expected)
