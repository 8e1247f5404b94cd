"""The KV cache's storage types: their names, codes and bytes (no numba: cheap commands import it).

A cache of type f32 holds float32 rows [blocks, block_size, kv_heads, head_dim]; every other type holds raw bytes,
uint8 [blocks, block_size, kv_heads, row_bytes], one head's keys (or values) of one token a row:
- f16 / bf16: 2 bytes a value (IEEE half / the top half of a float32, rounded to nearest even);
- q8_0 / q4_0: ggml's blocks of 32 values (d f16 | 32 int8; d f16 | 16 bytes of nibbles); q8_0 quantized as
  llama.cpp's quantize_row_q8_0 reference does; q4_0 blocks hold the orthonormal Walsh-Hadamard transform of the
  32 values (read back through the same transform, its own inverse: reference_kv.hadamard_blocks), with the
  least-squares best of make_qx_quants' candidate scales (Q4_0_NUMERATORS) rather than peak / -8, and its
  q4_0_outliers values of largest magnitude kept apart (f16 | index) after the blocks;
- fp8: blocks of 32 E4M3 bytes after an f16 scale (amax / 448) per head and block of 32 values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32, F16, BF16, Q8_0, Q4_0, FP8 = range(6)
VALUES_PER_BLOCK = 32  # the quantized types' block: one scale per head and 32 values
# q4_0's candidate scales, as llama.cpp's make_qx_quants tries them: codes round(x * numerator / peak) for the
# block's value of largest magnitude `peak`, numerator -(8 + 0.1 i), i = -9..9 (i = 0 is quantize_row_q4_0_ref's
# peak / -8); a block keeps the candidate whose codes fit it best by least squares (reference_kv._quantize_q4_0)
Q4_0_NUMERATORS = np.float32([-(8.0 + 0.1 * i) for i in range(-9, 10)])
# a q4_0 row ends with its `q4_0_outliers` values of largest magnitude, kept as (f16 value | uint8 index) and
# zeroed in the blocks: keys carry a few channels 10-70x the others' size (Gemma 3's low-frequency rope channels),
# which set their blocks' scales and crushed the other 31 values
Q4_0_OUTLIER_BYTES = 3
MAX_Q4_0_OUTLIER_WIDTH = 256  # a one-byte index


# "1": importing kernels_numba.cpu leaves the KV row codecs unregistered (cpu/kv_row.py: register_row_codecs), for
# a first run's side child that compiles other kernels first; set before that import, in that process alone
DEFER_ROW_CODECS_ENV = "POCKET_DEFER_KV_CODECS"


def q4_0_outliers(width: int) -> int:
    """Values kept apart in a q4_0 row of `width` values: as many as keep the row within 0.15x of float32's bytes
    (0.6 width >= 18 width / 32 + 3 n: n <= width / 80); none in rows too wide for a one-byte index."""
    return width // 80 if width <= MAX_Q4_0_OUTLIER_WIDTH else 0


@dataclass(frozen=True)
class KVType:
    name: str
    code: int
    block_bytes: int  # bytes per 32 values
    is_blocked: bool  # quantized in blocks of 32 values with a scale

    def row_bytes(self, width: int) -> int:
        """Bytes of one head's row of `width` values."""
        outliers = q4_0_outliers(width) * Q4_0_OUTLIER_BYTES if self.code == Q4_0 else 0
        return width * self.block_bytes // VALUES_PER_BLOCK + outliers

    def row_width(self, row_bytes: int) -> int:
        """Values in a row of `row_bytes` bytes (row_bytes' inverse; a q4_0 row's outliers take < one block)."""
        if self.code == Q4_0:
            return row_bytes // self.block_bytes * VALUES_PER_BLOCK
        return row_bytes * VALUES_PER_BLOCK // self.block_bytes

    def row_length(self, width: int) -> int:
        """The cache array's last dimension for rows of `width` values: float32 values for f32, else bytes."""
        return width if self.code == F32 else self.row_bytes(width)


KV_TYPES = {t.name: t for t in (
    KVType("f32", F32, 128, False), KVType("f16", F16, 64, False), KVType("bf16", BF16, 64, False),
    KVType("q8_0", Q8_0, 34, True), KVType("q4_0", Q4_0, 18, True), KVType("fp8", FP8, 34, True))}
KV_TYPE_NAMES = tuple(KV_TYPES)
_BY_CODE = {t.code: t for t in KV_TYPES.values()}


def kv_type_named(name: str) -> KVType:
    """The KVType called `name`; a ValueError naming the choices otherwise."""
    kv_type = KV_TYPES.get(name)
    if kv_type is None:
        raise ValueError(f"unknown --kv-type {name!r}; expected one of: {', '.join(KV_TYPE_NAMES)}")
    return kv_type


def kv_type_of_code(code: int) -> KVType:
    return _BY_CODE[code]


def check_row_width(kv_type: KVType, width: int) -> None:
    """A blocked type needs whole blocks of 32 values per head row."""
    if kv_type.is_blocked and width % VALUES_PER_BLOCK:
        raise ValueError(f"--kv-type {kv_type.name} needs a head dimension that is a multiple of "
                         f"{VALUES_PER_BLOCK}, this model's is {width} (use f16, bf16 or f32)")


def kv_type_of(cache) -> int:
    """The KV type code of one layer's cache array (make_kv_cache tags it; an untagged float32 array is f32)."""
    return getattr(cache, "kv_type", F32)


class KVBlocks(np.ndarray):
    """One layer's keys or values, tagged with their KV type code (kv_type_of reads it; numba sees a plain
    array). Views keep the tag."""
    kv_type = F32

    def __array_finalize__(self, source):
        self.kv_type = getattr(source, "kv_type", F32)


def tag_kv_type(array, code: int):
    """The cache array `array` tagged with KV type `code`: a KVBlocks view of a host array; a device array gets
    the attribute itself."""
    if isinstance(array, np.ndarray):
        array = array.view(KVBlocks)
    array.kv_type = code
    return array


def make_kv_layer(num_blocks: int, block_size: int, num_kv_heads: int, width: int, kv_type: KVType,
                  zeros=np.zeros):
    """One layer's keys (or values) of `width` values a head, zero-filled by `zeros(shape, dtype)`, tagged."""
    dtype = np.float32 if kv_type.code == F32 else np.uint8
    return tag_kv_type(zeros((num_blocks, block_size, num_kv_heads, kv_type.row_length(width)), dtype=dtype),
                       kv_type.code)
