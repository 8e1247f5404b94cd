"""Plain numpy version of every op: the oracle the fast backends are tested against.

Every function here favours clarity over speed. Dequantization decodes ggml's blocks with reference_blocks, whose
float32 arithmetic runs in the same order as ggml (and gguf-py), so it is bit-exact with them.
"""
from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.errors import UnsupportedQuantType
from kernels_numba.kv_type import kv_type_of as _kv_type_of
from kernels_numba.reference_kv import dequantize_kv_rows as _dequantize_kv_rows
from kernels_numba.reference_kv import quantize_kv_rows as _quantize_kv_rows
from kernels_numba.reference_blocks import BLOCK_DECODERS

__all__ = ["dequantize", "dequantize_rows", "embedding", "linear", "rms_norm", "rope", "silu", "gelu_tanh",
           "silu_mul", "gelu_mul", "softcap", "store_kv", "paged_attention"]

LINEAR_ROWS_PER_TILE = 4096  # keeps the float64 temporaries of `linear` small for big matrices
SUPPORTED_TYPES = frozenset({QT.F32, QT.F16, QT.BF16, *BLOCK_DECODERS})


def _decode_rows(ggml_type: QT, rows: np.ndarray, row_length: int) -> np.ndarray:
    """uint8 [r, bytes_per_row] -> float32 [r, row_length]."""
    if ggml_type == QT.F32:
        return np.ascontiguousarray(rows).view(np.float32).copy()
    if ggml_type == QT.F16:
        return np.ascontiguousarray(rows).view(np.float16).astype(np.float32)
    if ggml_type == QT.BF16:
        return (np.ascontiguousarray(rows).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    blocks = np.ascontiguousarray(rows).reshape(-1, type_size)
    return BLOCK_DECODERS[ggml_type](blocks).reshape(len(rows), row_length)


def _into(result: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """`result` as float32, written into `out` when the caller passed one."""
    if out is None:
        return result.astype(np.float32, copy=False)
    out[...] = result
    return out


def _check_supported(w: WeightTensor) -> None:
    if w.ggml_type not in SUPPORTED_TYPES:
        raise UnsupportedQuantType(w.type_name, w.name, "reference")


# ---------------------------------------------------------------- weights

def dequantize(w: WeightTensor) -> np.ndarray:
    """All of `w` as float32 of shape w.shape."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels_numba/reference_fp8.py
        return dequantize_rows(w, np.arange(w.num_rows)).reshape(w.shape)
    _check_supported(w)
    return _decode_rows(w.ggml_type, w.data, w.row_length).reshape(w.shape)


def dequantize_rows(w: WeightTensor, row_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rows `row_ids` of `w` as float32 [len(row_ids), row_length]."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels_numba/reference_fp8.py
        from kernels_numba.reference_fp8 import fp8_dequantize_rows
        return _into(fp8_dequantize_rows(w, row_ids), out)
    _check_supported(w)
    row_ids = np.asarray(row_ids, dtype=np.int64).reshape(-1)
    return _into(_decode_rows(w.ggml_type, w.data[row_ids], w.row_length), out)


def embedding(token_ids: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """Embedding rows of `token_ids`: float32 [n, dim]."""
    return dequantize_rows(w, token_ids, out)


def linear(x: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """y = x @ W.T with x: [n, k], W: [m, k] -> [n, m], accumulated in float64."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels_numba/reference_fp8.py
        from kernels_numba.reference_fp8 import fp8_linear
        return _into(fp8_linear(x, w), out)
    _check_supported(w)
    x64 = np.asarray(x, dtype=np.float64)
    num_rows = w.num_rows
    if out is None:
        out = np.empty((x64.shape[0], num_rows), dtype=np.float32)
    for start in range(0, num_rows, LINEAR_ROWS_PER_TILE):
        stop = min(start + LINEAR_ROWS_PER_TILE, num_rows)
        tile = _decode_rows(w.ggml_type, w.data[start:stop], w.row_length).astype(np.float64)
        out[:, start:stop] = x64 @ tile.T
    return out


# ---------------------------------------------------------------- normalisation and activations

def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, out: np.ndarray | None = None) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    x64 = np.asarray(x, dtype=np.float64)
    inv_rms = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return _into(x64 * inv_rms * np.asarray(weight, dtype=np.float64), out)


def _silu64(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for very negative x: silu -> -0
        return x64 / (1.0 + np.exp(-x64))


def silu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * sigmoid(x)."""
    return _into(_silu64(x), out)


GELU_SQRT_2_OVER_PI = 0.7978845608028654
GELU_COEF_A = 0.044715


def _gelu_tanh64(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    inner = GELU_SQRT_2_OVER_PI * x64 * (1.0 + GELU_COEF_A * x64 * x64)
    return 0.5 * x64 * (1.0 + np.tanh(inner))


def gelu_tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """GELU with ggml's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))."""
    return _into(_gelu_tanh64(x), out)


def silu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """silu(gate) * up (SwiGLU feed-forward)."""
    return _into(_silu64(gate) * np.asarray(up, dtype=np.float64), out)


def gelu_mul(gate: np.ndarray, up: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """gelu_tanh(gate) * up (GeGLU feed-forward, Gemma)."""
    return _into(_gelu_tanh64(gate) * np.asarray(up, dtype=np.float64), out)


def softcap(x: np.ndarray, cap: float, out: np.ndarray | None = None) -> np.ndarray:
    """cap * tanh(x / cap)."""
    return _into(cap * np.tanh(np.asarray(x, dtype=np.float64) / cap), out)


# ---------------------------------------------------------------- rotary position embedding

def _rope_angles(positions: np.ndarray, head_dim: int, theta: float, freq_scale: float = 1.0,
                freq_factors: np.ndarray | None = None) -> np.ndarray:
    """Rotation angle of pair i at each position: pos * freq_scale * theta^(-2i/head_dim) / freq_factors[i]."""
    pair_ids = np.arange(head_dim // 2, dtype=np.float64)
    inv_freq = float(theta) ** (-2.0 * pair_ids / head_dim)
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, dtype=np.float64)
    return np.asarray(positions, dtype=np.float64)[:, None] * freq_scale * inv_freq[None, :]


def rope(x: np.ndarray, positions: np.ndarray, theta: float, is_neox: bool, freq_scale: float = 1.0,
         freq_factors: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Rotate x: [n, heads, head_dim] by position; neox pairs (i, i + head_dim/2), normal pairs (2i, 2i+1)."""
    head_dim = x.shape[-1]
    angles = _rope_angles(positions, head_dim, theta, freq_scale, freq_factors)[:, None, :]  # [n, 1, half]
    cos, sin = np.cos(angles), np.sin(angles)
    x64 = np.asarray(x, dtype=np.float64)
    if is_neox:
        first, second = x64[..., :head_dim // 2], x64[..., head_dim // 2:]
    else:
        first, second = x64[..., 0::2], x64[..., 1::2]
    rotated = np.empty_like(x64)  # written pair by pair, so `out` may alias x
    if is_neox:
        rotated[..., :head_dim // 2] = first * cos - second * sin
        rotated[..., head_dim // 2:] = first * sin + second * cos
    else:
        rotated[..., 0::2] = first * cos - second * sin
        rotated[..., 1::2] = first * sin + second * cos
    return _into(rotated, out)


# ---------------------------------------------------------------- paged KV cache and attention

def store_kv(k: np.ndarray, v: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
             slot_mapping: np.ndarray) -> None:
    """Write token i of k/v: [n, kv_heads, head_dim] into cache slot slot_mapping[i] (-1: skip)."""
    block_size = k_cache.shape[1]
    for i, slot in enumerate(np.asarray(slot_mapping)):
        if slot < 0:
            continue
        k_cache[slot // block_size, slot % block_size] = _quantize_kv_rows(k[i], _kv_type_of(k_cache))
        v_cache[slot // block_size, slot % block_size] = _quantize_kv_rows(v[i], _kv_type_of(v_cache))


def _gather_sequence_kv(cache: np.ndarray, block_table: np.ndarray, num_tokens: int) -> np.ndarray:
    """Tokens 0..num_tokens-1 of one sequence from the paged cache (any KV type): float32 [num_tokens, kv_heads,
    head_dim]."""
    block_size = cache.shape[1]
    positions = np.arange(num_tokens)
    return _dequantize_kv_rows(np.asarray(cache[block_table[positions // block_size], positions % block_size]),
                              _kv_type_of(cache))


def _is_visible(query_pos: np.ndarray, key_pos: np.ndarray, sliding_window: int) -> np.ndarray:
    """Causal mask plus llama.cpp's standard SWA: masked when query_pos - key_pos >= sliding_window."""
    visible = key_pos <= query_pos
    if sliding_window > 0:
        visible &= (query_pos - key_pos) < sliding_window
    return visible


def paged_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray,
                    context_lens: np.ndarray, query_start_loc: np.ndarray, scale: float,
                    sliding_window: int = 0, softcap: float = 0.0, out: np.ndarray | None = None) -> np.ndarray:
    """Causal (optionally sliding-window, soft-capped) attention of q: [n, heads, head_dim] over a paged cache."""
    num_heads = q.shape[1]
    group_size = num_heads // k_cache.shape[2]
    result = np.zeros(q.shape, dtype=np.float64)
    for seq in range(len(context_lens)):
        first, last = int(query_start_loc[seq]), int(query_start_loc[seq + 1])
        if last == first:
            continue
        num_ctx = int(context_lens[seq])
        keys = _gather_sequence_kv(k_cache, block_tables[seq], num_ctx).astype(np.float64)
        values = _gather_sequence_kv(v_cache, block_tables[seq], num_ctx).astype(np.float64)
        query_pos = np.arange(num_ctx - (last - first), num_ctx)[:, None]
        visible = _is_visible(query_pos, np.arange(num_ctx)[None, :], sliding_window)  # [nq, ctx]
        for head in range(num_heads):
            kv_head = head // group_size
            scores = q[first:last, head].astype(np.float64) @ keys[:, kv_head].T * scale
            if softcap > 0.0:
                scores = softcap * np.tanh(scores / softcap)
            scores = np.where(visible, scores, -np.inf)
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
            result[first:last, head] = weights @ values[:, kv_head]
    return _into(result, out)


# ---------------------------------------------------------------- mixture of experts, Gated DeltaNet
# (their numpy oracles live in reference_moe.py and reference_deltanet.py; re-exported so get_ops finds them)
from kernels_numba.reference_deltanet import (conv1d_silu, deltanet_gates, expand_heads,  # noqa: E402
                                              gated_delta_rule_chunked, gated_delta_rule_recurrent,
                                              gated_rms_norm, l2_normalize)
from kernels_numba.reference_gated_attention import rope_partial, sigmoid_mul  # noqa: E402
from kernels_numba.reference_moe import moe_combine, moe_linear, moe_route  # noqa: E402

# ---------------------------------------------------------------- the glue between ops, memory, top-k
# (numpy, shared with the CPU backend: kernels_numba/host_arrays.py)
from kernels_numba.host_arrays import *  # noqa: E402,F401,F403  (host_arrays.__all__: a new glue op lands once)
