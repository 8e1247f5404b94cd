"""The lookup tables of ggml's i-quants (format constants, shared by the numpy reference and the numba kernels).

Tables hold float32 values, ready to multiply: every entry is a small integer or +-1, so converting it early is
exact and decoders stay bit-exact with ggml. The IQ2_XXS / IQ3_XXS grids are unpacked from gguf-py's copies of
llama.cpp's `iq2xxs_grid` / `iq3xxs_grid` at import time. numba bakes these arrays into its cached machine code
as constants, which is safe because they are part of the file format and never change.
"""
import numpy as np
from gguf import quants

# IQ4_NL / IQ4_XS: a 4-bit index picks one of 16 non-uniform levels (llama.cpp `kvalues_iq4nl`)
IQ4_NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                         dtype=np.float32)


def _even_parity_signs() -> np.ndarray:
    """llama.cpp `ksigns_iq2xs`: 7 stored sign bits plus an 8th that makes the number of minus signs even."""
    index = np.arange(128, dtype=np.uint8)
    parity = np.unpackbits(index[:, None], axis=-1).sum(axis=-1) & 1
    return index | (parity.astype(np.uint8) << 7)


def _unpacked_grid(quant_class) -> np.ndarray:
    """gguf-py's grid of an i-quant class as float32 [entries, values per entry] (magnitudes, before signs)."""
    quant_class.init_grid()
    return np.ascontiguousarray(quant_class.grid.reshape(quant_class.grid_shape), dtype=np.float32)


KSIGNS = _even_parity_signs()  # uint8 [128]: bit j set means value j of a group of 8 is negative
# IQ2_XXS / IQ3_XXS store a 7-bit KSIGNS index per 8 values; row i here is KSIGNS[i] as +-1.0 per value
SIGN_VALUES = np.where(np.unpackbits(KSIGNS[:, None], axis=-1, bitorder="little") == 1,
                       np.float32(-1.0), np.float32(1.0))
IQ2_XXS_GRID = _unpacked_grid(quants.IQ2_XXS)  # [256, 8], values in {8, 25, 43}
IQ3_XXS_GRID = _unpacked_grid(quants.IQ3_XXS)  # [256, 4], values in {4, 12, ..., 52, 62}
