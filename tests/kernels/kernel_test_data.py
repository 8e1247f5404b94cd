"""Random but valid quantized weights for kernel tests."""
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from gguf_loader.weight_tensor import WeightTensor, make_weight_tensor

# byte offsets of the fp16 scale fields inside one block of each type
FP16_FIELD_OFFSETS = {
    QT.Q4_0: (0,), QT.Q4_1: (0, 2), QT.Q5_0: (0,), QT.Q5_1: (0, 2), QT.Q8_0: (0,),
    QT.Q2_K: (80, 82), QT.Q3_K: (108,), QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,),
    QT.IQ4_NL: (0,), QT.IQ4_XS: (0,), QT.IQ2_XXS: (0,), QT.IQ3_XXS: (0,),
}
QUANT_TYPES = tuple(FP16_FIELD_OFFSETS)
FLOAT_TYPES = (QT.F32, QT.F16, QT.BF16)
ALL_TYPES = FLOAT_TYPES + QUANT_TYPES


def random_row_bytes(ggml_type: QT, num_rows: int, row_length: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [num_rows, bytes_per_row]: random quants with finite fp16 scales, or random floats."""
    if ggml_type == QT.F32:
        return rng.standard_normal((num_rows, row_length)).astype(np.float32).view(np.uint8)
    if ggml_type == QT.F16:
        return rng.standard_normal((num_rows, row_length)).astype(np.float16).view(np.uint8)
    if ggml_type == QT.BF16:  # top halves of random float32s: finite, sane magnitudes
        values = rng.standard_normal((num_rows, row_length)).astype(np.float32)
        return (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    blocks = rng.integers(0, 256, size=(num_rows, row_length // block_size, type_size), dtype=np.uint8)
    for offset in FP16_FIELD_OFFSETS[ggml_type]:
        scales = rng.uniform(-0.05, 0.05, size=blocks.shape[:2] + (1,)).astype(np.float16)
        blocks[..., offset:offset + 2] = scales.view(np.uint8)
    return blocks.reshape(num_rows, -1)


def random_weight(ggml_type: QT, shape: tuple[int, int], rng: np.random.Generator, name: str = "w") -> WeightTensor:
    """A read-only WeightTensor of random valid blocks, like a memory-mapped model tensor."""
    raw = random_row_bytes(ggml_type, shape[0], shape[1], rng)
    raw.flags.writeable = False
    return make_weight_tensor(name, ggml_type, shape, raw)


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| in float64."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(actual, dtype=np.float64) - expected) / np.linalg.norm(expected))


def deltanet_inputs(rng: np.random.Generator, num_tokens: int, heads: int, key_dim: int = 8, value_dim: int = 6):
    """q, k (L2-normalised, q scaled), v, log-decay g < 0, beta in [0, 1) and a random incoming state."""
    from kernels_numba import reference_deltanet as ref_dn

    q = ref_dn.l2_normalize(rng.standard_normal((num_tokens, heads, key_dim))) * np.float32(key_dim ** -0.5)
    k = ref_dn.l2_normalize(rng.standard_normal((num_tokens, heads, key_dim)))
    v = rng.standard_normal((num_tokens, heads, value_dim)).astype(np.float32)
    g = -np.abs(rng.standard_normal((num_tokens, heads))).astype(np.float32)
    beta = rng.uniform(size=(num_tokens, heads)).astype(np.float32)
    state = rng.standard_normal((heads, key_dim, value_dim)).astype(np.float32)
    return q, k, v, g, beta, state
