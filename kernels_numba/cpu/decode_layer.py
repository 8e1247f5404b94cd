"""One decoder layer for one token in a single njit call: the decode step's per-layer ops without Python between.

A decode step of Gemma 3 270M ran ~20 kernel calls per layer through Python (norms, three mat-vecs, q/k norms,
two ropes, the KV store, attention, adds); each call cost 5-35 us of argument checks, typing and thread-count
bookkeeping, several ms per token in all. This runs the same kernels (the same functions the unfused ops call,
so the numbers agree with them to rounding) from compiled code: the mat-vecs still wake the thread pool, the
small ops run on the calling thread.

`plan_decode_layer` gathers what does not change between tokens once per layer (a DecodeLayerPlan, or None
when a weight has no fused dot: FP8, or F32 which linear sends to BLAS); `decode_layer` runs it. In the plan:
- mats: the (q, k, v, o, gate, up, down) weights as read-only uint8 [rows, bytes_per_row]; codes: their
  quant_type codes.
- norms: (attn, q, k, post_attn, ffn, post_ffw) float32 weights; a size-0 array = no such norm.
- biases: (q, k, v) float32; size 0 = none. inv_freq: float64 [head_dim / 2] of this layer's rope.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu import quant_type as qt
from kernels_numba.cpu.activation import GELU_TANH, SILU, apply_range
from kernels_numba.cpu.attention import attend_tasks, attend_tasks_parallel
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.cpu.kv_store import store_kv_into
from kernels_numba.cpu.matmul import matvec_into
from kernels_numba.cpu.norm import rms_norm_rows_into
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, pool_threads
from kernels_numba.cpu.rotary import rope_inv_freq, rope_tokens_into

Q, K, V, O, GATE, UP, DOWN = range(7)
ATTN_NORM, Q_NORM, K_NORM, POST_ATTN_NORM, FFN_NORM, POST_FFW_NORM = range(6)


@njit(cache=True, inline="always")
def _norm_rows_into(rows, weight, eps, out):
    """rms_norm over each row of rows: [n, d] into out; a size-0 weight (a norm the model lacks) leaves out as it
    is, so optional norms are applied in place (out is rows)."""
    if weight.size:
        rms_norm_rows_into(rows, weight, eps, out, 0, rows.shape[0])


@njit(cache=True)
def _add_into(x, y):
    for j in range(x.size):
        x[j] += y[j]


@njit(cache=True)
def _attend(q, k_cache, v_cache, block_table, position, scale, sliding_window, softcap, out):
    """Attention of one token's q: [1, heads, head_dim] at `position` over its sequence's cached keys."""
    block_tables = block_table.reshape(1, block_table.size)
    context_lens = np.full(1, position + 1, dtype=np.int32)
    query_start_loc = np.array([0, 1], dtype=np.int32)
    token_seq = np.zeros(1, dtype=np.int64)
    keys_seen = position + 1 if sliding_window <= 0 else min(position + 1, sliding_window)
    threads = pool_threads()
    # the same work estimate and threshold as paged_attention's
    if threads > 1 and keys_seen * q.shape[1] * q.shape[2] * 2 >= PARALLEL_MIN_WORK:
        attend_tasks_parallel(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, token_seq, scale,
                              sliding_window, softcap, out, max(1, min(q.shape[1], CHUNKS_PER_THREAD * threads)))
    else:
        attend_tasks(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, token_seq, scale,
                     sliding_window, softcap, out, 0, q.shape[1])


@njit(cache=True)
def _project_heads(y, bias, norm, num_heads, head_dim, eps):
    """y: [1, heads * head_dim] -> [1, heads, head_dim] (+ bias, per-head rms_norm), in place."""
    for j in range(bias.size):
        y[0, j] += bias[j]
    heads = y.reshape(num_heads, head_dim)
    _norm_rows_into(heads, norm, eps, heads)
    return y.reshape(1, num_heads, head_dim)


@njit(cache=True)
def decode_layer_into(x, mats, codes, norms, biases, inv_freq, is_neox, num_heads, num_kv_heads, head_dim, eps,
                      activation, k_cache, v_cache, block_table, position, slot, scale, sliding_window, softcap):
    """x: float32 [1, hidden] of one token at `position`, updated in place to the layer's output; its k/v go to
    cache slot `slot`. activation: activation.SILU or GELU_TANH (gated by up)."""
    h = np.empty_like(x)
    _norm_rows_into(x, norms[ATTN_NORM], eps, h)
    q = np.empty((1, mats[Q].shape[0]), dtype=np.float32)
    k = np.empty((1, mats[K].shape[0]), dtype=np.float32)
    v = np.empty((1, mats[V].shape[0]), dtype=np.float32)
    matvec_into(codes[Q], mats[Q], h, q)
    matvec_into(codes[K], mats[K], h, k)
    matvec_into(codes[V], mats[V], h, v)
    q3 = _project_heads(q, biases[Q], norms[Q_NORM], num_heads, head_dim, eps)
    k3 = _project_heads(k, biases[K], norms[K_NORM], num_kv_heads, head_dim, eps)
    v3 = _project_heads(v, biases[V], np.empty(0, dtype=np.float32), num_kv_heads, head_dim, eps)
    positions = np.full(1, position, dtype=np.int64)
    rope_tokens_into(q3, positions, inv_freq, is_neox, q3, 0, 1)
    rope_tokens_into(k3, positions, inv_freq, is_neox, k3, 0, 1)
    store_kv_into(k3, v3, k_cache, v_cache, np.full(1, slot, dtype=np.int64))
    attended = np.empty_like(q3)
    _attend(q3, k_cache, v_cache, block_table, position, scale, sliding_window, softcap, attended)
    o = np.empty_like(x)
    matvec_into(codes[O], mats[O], attended.reshape(1, attended.size), o)
    _norm_rows_into(o, norms[POST_ATTN_NORM], eps, o)
    _add_into(x[0], o[0])
    _norm_rows_into(x, norms[FFN_NORM], eps, h)
    gate = np.empty((1, mats[GATE].shape[0]), dtype=np.float32)
    up = np.empty_like(gate)
    matvec_into(codes[GATE], mats[GATE], h, gate)
    matvec_into(codes[UP], mats[UP], h, up)
    apply_range(activation, gate[0], up[0], np.float32(0.0), gate[0], 0, gate.shape[1])
    matvec_into(codes[DOWN], mats[DOWN], gate, o)
    _norm_rows_into(o, norms[POST_FFW_NORM], eps, o)
    _add_into(x[0], o[0])


@dataclass(frozen=True)
class DecodeLayerPlan:
    mats: tuple[np.ndarray, ...]
    codes: tuple[int, ...]
    norms: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    inv_freq: np.ndarray
    is_neox: bool
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    activation: int
    scale: np.float32
    sliding_window: int
    softcap: np.float32


_NONE = np.zeros(0, dtype=np.float32)


def _vector(v: np.ndarray | None) -> np.ndarray:
    """One numba type for every norm/bias slot: writable contiguous float32 (these are KBs), size 0 for none."""
    return _NONE if v is None else np.array(v, dtype=np.float32)


def plan_decode_layer(mats: tuple[WeightTensor, ...], norms: tuple[np.ndarray | None, ...],
                      biases: tuple[np.ndarray | None, ...], *, num_heads: int, num_kv_heads: int, head_dim: int,
                      eps: float, activation: str, rope_theta: float, is_neox: bool, rope_freq_scale: float = 1.0,
                      rope_freq_factors: np.ndarray | None = None, scale: float, sliding_window: int = 0,
                      softcap: float = 0.0) -> DecodeLayerPlan | None:
    """mats: (q, k, v, o, gate, up, down); norms: (attn, q, k, post_attn, ffn, post_ffw); biases: (q, k, v)."""
    if any(w.fp8 is not None or qt.TYPE_CODES.get(w.ggml_type, qt.F32) == qt.F32 for w in mats):
        return None
    return DecodeLayerPlan(
        tuple(readonly_bytes(w) for w in mats), tuple(qt.type_code_of(w) for w in mats),
        tuple(_vector(v) for v in norms), tuple(_vector(v) for v in biases),
        rope_inv_freq(head_dim, rope_theta, rope_freq_scale, rope_freq_factors), bool(is_neox), num_heads,
        num_kv_heads, head_dim, float(eps), GELU_TANH if activation == "gelu" else SILU, np.float32(scale),
        int(sliding_window), np.float32(softcap))


def decode_layer(x: np.ndarray, plan: DecodeLayerPlan, k_cache: np.ndarray, v_cache: np.ndarray,
                 block_table: np.ndarray, position: int, slot: int) -> None:
    """One token's layer, in place on x: float32 [1, hidden]; block_table: int32 [blocks] of its sequence."""
    p = plan
    decode_layer_into(x, p.mats, p.codes, p.norms, p.biases, p.inv_freq, p.is_neox, p.num_heads, p.num_kv_heads,
                      p.head_dim, p.eps, p.activation, k_cache, v_cache, block_table, position, slot, p.scale,
                      p.sliding_window, p.softcap)
