"""numpy decoders of ggml's quant blocks, one per type: uint8 [nb, type_size] -> float32 [nb, block_size].

The float32 arithmetic happens in the same order as ggml (and gguf-py), so every decoder is bit-exact with them.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from kernels_numba.iq_tables import IQ2_XXS_GRID, IQ3_XXS_GRID, IQ4_NL_LEVELS, SIGN_VALUES

__all__ = ["BLOCK_DECODERS", "QK_K"]

QK_K = 256  # values per super-block of the k-quants and i-quants


def _f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The fp16 field at byte `offset` of every block, as float32 [nb, 1]."""
    return np.ascontiguousarray(blocks[:, offset:offset + 2]).view(np.float16).astype(np.float32)


def _nibbles_low_then_high(packed: np.ndarray) -> np.ndarray:
    """[nb, n] bytes -> [nb, 2n] values: all low nibbles first, then all high nibbles (ggml's 32-value order)."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1)


def _bits_of_u32(blocks: np.ndarray, offset: int) -> np.ndarray:
    """Bits 0..31 of the little-endian uint32 at `offset` as uint8 [nb, 32]."""
    return np.unpackbits(blocks[:, offset:offset + 4], axis=-1, bitorder="little")


def _decode_q4_0(blocks):
    d = _f16_field(blocks, 0)
    q = _nibbles_low_then_high(blocks[:, 2:18]).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def _decode_q4_1(blocks):
    d, m = _f16_field(blocks, 0), _f16_field(blocks, 2)
    q = _nibbles_low_then_high(blocks[:, 4:20]).astype(np.float32)
    return d * q + m


def _decode_q5_0(blocks):
    d = _f16_field(blocks, 0)
    q = _nibbles_low_then_high(blocks[:, 6:22]) | (_bits_of_u32(blocks, 2) << 4)
    return d * (q.astype(np.int8) - np.int8(16)).astype(np.float32)


def _decode_q5_1(blocks):
    d, m = _f16_field(blocks, 0), _f16_field(blocks, 2)
    q = _nibbles_low_then_high(blocks[:, 8:24]) | (_bits_of_u32(blocks, 4) << 4)
    return d * q.astype(np.float32) + m


def _decode_q8_0(blocks):
    d = _f16_field(blocks, 0)
    return blocks[:, 2:34].view(np.int8).astype(np.float32) * d


def _k_scales_and_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 packed bytes of Q4_K/Q5_K -> (8 six-bit scales, 8 six-bit mins) as uint8 [nb, 8] each.

    Bytes 0-3 hold scales 0-3 (low 6 bits), bytes 4-7 mins 0-3 (low 6 bits); bytes 8-11 hold the low 4 bits of
    scales 4-7 (low nibble) and mins 4-7 (high nibble), whose top 2 bits sit in the top bits of bytes 0-3 / 4-7.
    """
    first, second, extra = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([first & 0x3F, (extra & 0x0F) | ((first >> 6) << 4)], axis=-1)
    mins = np.concatenate([second & 0x3F, (extra >> 4) | ((second >> 6) << 4)], axis=-1)
    return scales, mins


def _k_quant_values(d, dmin, packed_scales, q):
    """Sub-block scaled values of Q4_K/Q5_K: (d*scale) * q - (dmin*min), q: uint8 [nb, 8, 32]."""
    scales, mins = _k_scales_and_mins(packed_scales)
    scale = (d * scales.astype(np.float32))[:, :, None]
    offset = (dmin * mins.astype(np.float32))[:, :, None]
    return (scale * q.astype(np.float32) - offset).reshape(-1, QK_K)


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """128 bytes -> [nb, 8, 32]: sub-block 2c is the low nibbles of bytes 32c..32c+31, sub-block 2c+1 the high."""
    chunks = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([chunks & 0x0F, chunks >> 4], axis=2).reshape(-1, 8, 32)


def _decode_q4_k(blocks):
    d, dmin = _f16_field(blocks, 0), _f16_field(blocks, 2)
    return _k_quant_values(d, dmin, blocks[:, 4:16], _k_nibbles(blocks[:, 16:144]))


def _decode_q5_k(blocks):
    d, dmin = _f16_field(blocks, 0), _f16_field(blocks, 2)
    high_bits = np.stack([(blocks[:, 16:48] >> i) & 1 for i in range(8)], axis=1)  # sub-block i uses bit i
    q = _k_nibbles(blocks[:, 48:176]) | (high_bits << 4)
    return _k_quant_values(d, dmin, blocks[:, 4:16], q)


def _decode_q6_k(blocks):
    low, high = blocks[:, 0:128], blocks[:, 128:192]
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16_field(blocks, 208)
    halves = []
    for h in range(2):  # each half of 128 values uses 64 low bytes and 32 high bytes
        lo = low[:, 64 * h:64 * h + 64]
        hi = high[:, 32 * h:32 * h + 32]
        low4 = np.concatenate([lo & 0x0F, lo >> 4], axis=-1)  # [nb, 128]
        high2 = np.concatenate([(hi >> s) & 3 for s in (0, 2, 4, 6)], axis=-1)  # [nb, 128]
        halves.append(low4 | (high2 << 4))
    q = (np.concatenate(halves, axis=-1).astype(np.int8) - np.int8(32)).astype(np.float32)
    scale = (d * scales)[:, :, None]  # one scale per 16 values
    return (scale * q.reshape(-1, 16, 16)).reshape(-1, QK_K)



def _two_bit_planes(qs: np.ndarray) -> np.ndarray:
    """Q2_K/Q3_K: 64 bytes -> [nb, 256]; value 128h + 32s + l is bits 2s, 2s+1 of byte 32h + l."""
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]
    return ((qs.reshape(-1, 2, 1, 32) >> shifts) & 3).reshape(-1, QK_K)


def _decode_q2_k(blocks):  # super-block: 16 scale bytes (low nibble: scale, high: min) | 64 quant bytes | d | dmin
    packed = blocks[:, 0:16]
    d, dmin = _f16_field(blocks, 80), _f16_field(blocks, 82)
    scale = (d * (packed & 0x0F).astype(np.float32))[:, :, None]  # one scale and min per 16 values
    offset = (dmin * (packed >> 4).astype(np.float32))[:, :, None]
    q = _two_bit_planes(blocks[:, 16:80]).reshape(-1, 16, 16).astype(np.float32)
    return (scale * q - offset).reshape(-1, QK_K)


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """The 12 packed bytes of Q3_K -> 16 signed six-bit scales as float32 [nb, 16].

    Scale k: low 4 bits in byte k % 8 (low nibble for k < 8, high nibble after), high 2 bits at bit 2*(k // 4)
    of byte 8 + k % 4; stored with an offset of 32.
    """
    low = np.concatenate([packed[:, 0:8] & 0x0F, packed[:, 0:8] >> 4], axis=-1)
    high = np.concatenate([(packed[:, 8:12] >> s) & 3 for s in (0, 2, 4, 6)], axis=-1)
    return ((low | (high << 4)).astype(np.int8) - np.int8(32)).astype(np.float32)


def _decode_q3_k(blocks):  # super-block: 32 high-bit bytes | 64 low-2-bit bytes | 12 scale bytes | d
    d = _f16_field(blocks, 108)
    scale = (d * _q3_k_scales(blocks[:, 96:108]))[:, :, None]  # one scale per 16 values
    high = np.concatenate([(blocks[:, 0:32] >> i) & 1 for i in range(8)], axis=-1)  # value 32i + l: bit i of byte l
    q = (_two_bit_planes(blocks[:, 32:96]) | (high << 2)).astype(np.int8) - np.int8(4)  # a clear high bit means -4
    return (scale * q.reshape(-1, 16, 16).astype(np.float32)).reshape(-1, QK_K)


# ---------------------------------------------------------------- i-quants: non-uniform levels and sign-grid codebooks

def _decode_iq4_nl(blocks):  # block: d f16 | 16 bytes of 4-bit level indices (low nibbles: values 0-15)
    d = _f16_field(blocks, 0)
    return d * IQ4_NL_LEVELS[_nibbles_low_then_high(blocks[:, 2:18])]


def _decode_iq4_xs(blocks):  # super-block: d | u16 high scale bits | 4 low scale bytes | 8 x 16 bytes of indices
    d = _f16_field(blocks, 0)
    scale_low = np.stack([blocks[:, 4:8] & 0x0F, blocks[:, 4:8] >> 4], axis=-1).reshape(-1, 8)  # sub-block 2j, 2j+1
    scale_high_bits = np.ascontiguousarray(blocks[:, 2:4]).view("<u2")
    scale_high = (scale_high_bits >> np.arange(0, 16, 2, dtype=np.uint16)).astype(np.uint8) & 3  # [nb, 8]
    scale = (scale_low | (scale_high << 4)).astype(np.int8) - np.int8(32)
    levels = IQ4_NL_LEVELS[_nibbles_low_then_high(blocks[:, 8:136].reshape(-1, 8, 16))]
    return ((d * scale.astype(np.float32))[:, :, None] * levels).reshape(-1, QK_K)


def _group_signs(sign_words: np.ndarray) -> np.ndarray:
    """uint32 [nb, 8] words holding four 7-bit sign indices (bits 0, 7, 14, 21) -> +-1 float32 [nb, 8, 4, 8]."""
    return SIGN_VALUES[(sign_words[..., None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127]


def _decode_iq2_xxs(blocks):  # super-block: d | 8 x (4 grid index bytes | u32: 4 x 7 sign bits, scale in bits 28-31)
    d = _f16_field(blocks, 0)
    groups = blocks[:, 2:66].reshape(-1, 8, 8)
    words = np.ascontiguousarray(groups[:, :, 4:8]).view("<u4")[..., 0]  # [nb, 8]
    group_scale = d * (np.float32(0.5) + (words >> 28).astype(np.float32)) * np.float32(0.25)
    magnitudes = IQ2_XXS_GRID[groups[:, :, 0:4]]  # [nb, 8, 4, 8]
    return (group_scale[:, :, None, None] * magnitudes * _group_signs(words)).reshape(-1, QK_K)


def _decode_iq3_xxs(blocks):  # super-block: d | 64 grid index bytes | 8 x u32: 4 x 7 sign bits, scale in bits 28-31
    d = _f16_field(blocks, 0)
    words = np.ascontiguousarray(blocks[:, 66:98]).view("<u4")  # [nb, 8], one per 32 values
    group_scale = d * (np.float32(0.5) + (words >> 28).astype(np.float32)) * np.float32(0.5)
    magnitudes = IQ3_XXS_GRID[blocks[:, 2:66]].reshape(-1, 8, 4, 8)  # two 4-value entries per 8 values
    return (group_scale[:, :, None, None] * magnitudes * _group_signs(words)).reshape(-1, QK_K)


BLOCK_DECODERS = {
    QT.Q4_0: _decode_q4_0, QT.Q4_1: _decode_q4_1, QT.Q5_0: _decode_q5_0, QT.Q5_1: _decode_q5_1,
    QT.Q8_0: _decode_q8_0, QT.Q2_K: _decode_q2_k, QT.Q3_K: _decode_q3_k, QT.Q4_K: _decode_q4_k,
    QT.Q5_K: _decode_q5_k, QT.Q6_K: _decode_q6_k, QT.IQ4_NL: _decode_iq4_nl, QT.IQ4_XS: _decode_iq4_xs,
    QT.IQ2_XXS: _decode_iq2_xxs, QT.IQ3_XXS: _decode_iq3_xxs,
}
