"""numpy oracle of the KV cache's types (kv_type.py): float32 rows <-> the bytes a cache row holds.

The CPU (numba) and CUDA quantizers do the same float32 operations in the same order, so their bytes equal these;
the rounding is half away from zero (floor(|v| + 0.5)) everywhere, like llama.cpp's roundf.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from gguf_loader.fp8_layout import E4M3_TABLE
from kernels_numba.kv_type import (BF16, F16, F32, FP8, Q4_0, Q4_0_NUMERATORS, Q8_0, VALUES_PER_BLOCK,
                                   kv_type_of_code, q4_0_outliers)

E4M3_MAX = 448.0
E4M3_MIN_NORMAL = 2.0 ** -6
_GGML_TYPES = {F16: QT.F16, BF16: QT.BF16, Q8_0: QT.Q8_0, Q4_0: QT.Q4_0}


def _round_away(v: np.ndarray) -> np.ndarray:
    """float32 round half away from zero."""
    return np.copysign(np.floor(np.abs(v) + np.float32(0.5)), v)


def _half_bits(d: np.ndarray) -> np.ndarray:
    """float32 [..., 1] -> its fp16 bytes [..., 2]."""
    return d.astype(np.float16).view(np.uint8)


def _inverse(d: np.ndarray) -> np.ndarray:
    safe = np.where(d == 0, np.float32(1.0), d)
    return np.where(d == 0, np.float32(0.0), np.float32(1.0) / safe).astype(np.float32)


def _quantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = (np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127.0)).astype(np.float32)
    q = _round_away(blocks * _inverse(d)).astype(np.int8)
    return np.concatenate([_half_bits(d), q.view(np.uint8)], axis=-1)


HADAMARD_SCALE = np.float32(1.0 / np.sqrt(VALUES_PER_BLOCK))


def hadamard_blocks(blocks: np.ndarray) -> np.ndarray:
    """The orthonormal Walsh-Hadamard transform of each block of 32 values [..., 32] (its own inverse), by
    butterflies in float32 in the order the CPU and CUDA kernels use: q4_0 stores the transform of each block, so
    an outlier's share spreads over the block and the small values keep more of their 4 bits."""
    x = np.array(blocks, dtype=np.float32)
    span = 1
    while span < VALUES_PER_BLOCK:
        pairs = x.reshape(x.shape[:-1] + (VALUES_PER_BLOCK // (2 * span), 2, span))
        low, high = pairs[..., 0, :].copy(), pairs[..., 1, :].copy()
        pairs[..., 0, :], pairs[..., 1, :] = low + high, low - high
        span *= 2
    return x * HADAMARD_SCALE


def q4_0_codes(blocks: np.ndarray, numerator) -> np.ndarray:
    """Signed codes in [-8, 7] of the candidate scale numerator / peak (Q4_0_NUMERATORS), float32:
    round(x * iscale) half away."""
    amax_at = np.abs(blocks).argmax(axis=-1)[..., None]
    peak = np.take_along_axis(blocks, amax_at, axis=-1)
    iscale = (np.float32(numerator) / np.where(peak == 0, np.float32(1.0), peak)).astype(np.float32)
    return np.clip(_round_away((blocks * iscale).astype(np.float32)), -8, 7)


def q4_0_fit(blocks: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum(x * code) (float64: the products are exact and the nonzero terms within a few binades, so the sum is
    too, whatever order or fused multiply-adds a kernel uses) and sum(code^2)."""
    return (blocks.astype(np.float64) * codes).sum(axis=-1), (codes * codes).sum(axis=-1).astype(np.float64)


def _quantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    """ggml q4_0 blocks (d f16 | 16 bytes of nibbles, code = nibble - 8) of the blocks' Hadamard transforms, with
    the least-squares scale of the best of llama.cpp's make_qx_quants candidates (Q4_0_NUMERATORS): the block's
    error is sum(x^2) - sumlx^2 / suml2, so the largest sumlx^2 / suml2 wins (the first of equals);
    d = sumlx / suml2. On the default model this took q4_0 KV's perplexity loss from +9.8% to +7.1% (amax / -8)."""
    blocks = hadamard_blocks(blocks)
    best_score = np.full(blocks.shape[:-1], -1.0)
    best_codes = np.zeros_like(blocks)
    d = np.zeros(blocks.shape[:-1], dtype=np.float32)
    for numerator in Q4_0_NUMERATORS:
        codes = q4_0_codes(blocks, numerator)
        sumlx, suml2 = q4_0_fit(blocks, codes)
        score = np.where(suml2 > 0, sumlx * sumlx / np.where(suml2 > 0, suml2, 1.0), 0.0)
        better = score > best_score
        best_score = np.where(better, score, best_score)
        best_codes = np.where(better[..., None], codes, best_codes)
        d = np.where(better, np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, 1.0), 0.0).astype(np.float32), d)
    q = (best_codes + 8).astype(np.uint8)
    half = VALUES_PER_BLOCK // 2
    return np.concatenate([_half_bits(d[..., None]), q[..., :half] | (q[..., half:] << 4)], axis=-1)


def e4m3_codes(v: np.ndarray) -> np.ndarray:
    """float32 values (|v| <= 448) -> E4M3 bytes, rounded half away from zero; saturates at 448 (code 0x7e)."""
    a = np.minimum(np.abs(v).astype(np.float64), E4M3_MAX)
    mantissa, exponent = np.frexp(a)  # a = mantissa * 2**exponent, mantissa in [0.5, 1)
    steps = np.floor(mantissa * 16 + 0.5) - 8  # 3 mantissa bits; 8 carries into the exponent
    code = (exponent - 1 + 7 + (steps == 8)) * 8 + np.where(steps == 8, 0, steps)
    code = np.where(a < E4M3_MIN_NORMAL, np.floor(a * 512 + 0.5), code)  # subnormals: steps of 2^-9
    code = np.minimum(code, 0x7E).astype(np.uint8)
    return code | (np.signbit(v).astype(np.uint8) << 7)


def _quantize_fp8(blocks: np.ndarray) -> np.ndarray:
    d = (np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(E4M3_MAX)).astype(np.float16).astype(np.float32)
    return np.concatenate([_half_bits(d), e4m3_codes(blocks * _inverse(d))], axis=-1)


_BLOCK_QUANTIZERS = {Q8_0: _quantize_q8_0, Q4_0: _quantize_q4_0, FP8: _quantize_fp8}


def _bf16_bits(rows: np.ndarray) -> np.ndarray:
    bits = rows.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(rows), np.uint16(0x7FC0), rounded)


def quantize_kv_rows(rows: np.ndarray, code: int) -> np.ndarray:
    """float32 [..., width] -> the cache bytes [..., row_bytes] of type `code` (float32 itself for f32)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if code == F32:
        return rows.copy()
    if code == F16:
        return rows.astype(np.float16).view(np.uint8)
    if code == BF16:
        return _bf16_bits(rows).view(np.uint8)
    if code == Q4_0:
        return _quantize_q4_0_rows(rows)
    blocks = rows.reshape(rows.shape[:-1] + (-1, VALUES_PER_BLOCK))
    encoded = _BLOCK_QUANTIZERS[code](blocks)
    return encoded.reshape(rows.shape[:-1] + (kv_type_of_code(code).row_length(rows.shape[-1]),))


def q4_0_outlier_positions(rows: np.ndarray) -> np.ndarray:
    """int64 [..., q4_0_outliers(width)]: each row's positions of largest magnitude, largest first, the lower
    position first among equals."""
    count = q4_0_outliers(rows.shape[-1])
    return np.argsort(-np.abs(rows), axis=-1, kind="stable")[..., :count]


def _quantize_q4_0_rows(rows: np.ndarray) -> np.ndarray:
    """q4_0 rows: the blocks of the rows with their outliers zeroed, then each outlier's f16 value and index."""
    at = q4_0_outlier_positions(rows)
    kept = np.take_along_axis(rows, at, axis=-1)
    rest = rows.copy()
    np.put_along_axis(rest, at, np.float32(0.0), axis=-1)
    blocks = _quantize_q4_0(rest.reshape(rows.shape[:-1] + (-1, VALUES_PER_BLOCK)))
    outliers = np.concatenate([_half_bits(kept[..., None]), at[..., None].astype(np.uint8)], axis=-1)
    return np.concatenate([blocks.reshape(rows.shape[:-1] + (-1,)), outliers.reshape(rows.shape[:-1] + (-1,))],
                          axis=-1)


def dequantize_kv_rows(data: np.ndarray, code: int) -> np.ndarray:
    """The cache bytes [..., row_bytes] of type `code` -> float32 [..., width]."""
    if code == F32:
        return np.asarray(data, dtype=np.float32)
    kv_type = kv_type_of_code(code)
    width = kv_type.row_width(data.shape[-1])
    flat = np.ascontiguousarray(data).reshape(-1, data.shape[-1])
    if code == FP8:
        blocks = flat.reshape(-1, kv_type.block_bytes)
        d = np.ascontiguousarray(blocks[:, :2]).view(np.float16).astype(np.float32)
        values = E4M3_TABLE[blocks[:, 2:]] * d
    else:
        from kernels_numba.reference import _decode_rows  # (reference imports this module)

        blocks_bytes = width * kv_type.block_bytes // VALUES_PER_BLOCK
        values = _decode_rows(_GGML_TYPES[code], flat[:, :blocks_bytes], width)
        if code == Q4_0:  # stored as the blocks' transforms: transformed back, then the outliers put back
            values = hadamard_blocks(values.reshape(-1, VALUES_PER_BLOCK)).reshape(-1, width)
            outliers = flat[:, blocks_bytes:].reshape(len(flat), -1, 3)
            kept = np.ascontiguousarray(outliers[..., :2]).view(np.float16)[..., 0].astype(np.float32)
            np.put_along_axis(values, outliers[..., 2].astype(np.int64), kept, axis=-1)
    return values.reshape(data.shape[:-1] + (width,)).astype(np.float32)
