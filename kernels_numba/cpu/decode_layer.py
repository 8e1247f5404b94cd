"""One decoder layer for a batch of decode tokens in a single njit call: the decode step's per-layer ops without
Python between. Each token is the next one of its own sequence (one query per sequence, at its last position).

A decode step of Gemma 3 270M ran ~20 kernel calls per layer through Python (norms, three mat-vecs, q/k norms,
two ropes, the KV store, attention, adds); each call cost 5-35 us of argument checks, typing and thread-count
bookkeeping, several ms per token in all. This runs the same kernels (the same functions the unfused ops call,
so the numbers agree with them to rounding) from compiled code: the mat-vecs still wake the thread pool, the
small ops run on the calling thread. A batch of n sequences (serve's decode steps) runs the same per-token code:
the int8 mat-vecs give a token the same bits alone and in a batch, and norms, rope and attention work per row,
so a sequence's tokens do not depend on which others share its step.

`plan_decode_layer` gathers what does not change between tokens once per layer (a DecodeLayerPlan, or None
when a weight has no fused dot: FP8, or F32 which linear sends to BLAS); `decode_layer` runs it. In the plan:
- mats: the (q, k, v, o, gate, up, down) weights as read-only uint8 [rows, bytes_per_row] as the CPU kernels
  read them (dispatch.cpu_operands: the run layout where there is one); codes: their quant_type codes. Each call
  passes their LinearKernels for its token count (dispatch.linear_kernel: the same paths linear takes), so the
  layer's glue compiles once and each weight type's leaf kernels once; and `mixed_paths`, None where all seven take
  the run path (the 8-bit dot tiers' usual case), so that only the run path's glue compiles (decode_layer_into's
  compile on an empty cache, Gemma 3 270M on a 2-vCPU AMD EPYC Zen 3: 41.9 -> 28.8-30.4 s, with the constant
  start indices and flags its callees took made runtime values, np.int64(0): numba compiles a callee again for
  each set of literal arguments it is given).
- norms: (attn, q, k, post_attn, ffn, post_ffw) float32 weights; a size-0 array = no such norm.
- biases: (q, k, v) float32; size 0 = none. inv_freq: float64 [head_dim / 2] of this layer's rope.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
from numba import njit, types

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.activation import GELU_TANH, SILU
from kernels_numba.cpu.attention import attend_tasks_kernel, attend_tokens
from kernels_numba.cpu.ir.native_call import NO_KERNEL, handles_array
from kernels_numba.cpu.kv_store import store_kv_into
from kernels_numba.cpu.matvec.dispatch import (RUN, cpu_operands, gated_linear_into, kernel_code, layer_linear_into,
                                                linear_kernel, linear_path, max_fused_tokens,
                                                shared_input_linear_into)
from kernels_numba.cpu.norm import rms_norm_rows_into
from kernels_numba.cpu.parallel_policy import PARALLEL_MIN_WORK, pool_threads
from kernels_numba.cpu.rotary import rope_inv_freq, rope_tables, rotate_tokens_into
from kernels_numba.kv_type import kv_type_of

Q, K, V, O, GATE, UP, DOWN = range(7)
ATTN_NORM, Q_NORM, K_NORM, POST_ATTN_NORM, FFN_NORM, POST_FFW_NORM = range(6)


@njit(cache=True, inline="always")
def _norm_rows_into(rows, weight, eps, out):
    """rms_norm over each row of rows: [n, d] into out; a size-0 weight (a norm the model lacks) leaves out as it
    is, so optional norms are applied in place (out is rows)."""
    if weight.size:
        rms_norm_rows_into(rows, weight, eps, out, np.int64(0), rows.shape[0])


@njit(cache=True)
def _add_into(x, y):
    for j in range(x.size):
        x[j] += y[j]


# work (q.k and p.v terms) from which the layer's attention takes the pool: a quarter of PARALLEL_MIN_WORK, as the
# q/k/v mat-vecs' region ran just before. SmolLM2 (9 heads, 3 kv heads, f16 KV), 8 sequences, 2 threads, AVX2 tier
# (AMD EPYC Zen 4, load ~3.7, min of 2000): 10 keys each 15.6 -> 10.2-14.3 us, 18 keys 24.6 -> 17.5 us; one
# sequence at 48 keys (55k terms, 3 tasks) 6.4 -> 6.2 us
ATTENTION_MIN_WORK = PARALLEL_MIN_WORK // 4


@njit(cache=True)
def _attend(q, k_cache, v_cache, kv_type, block_tables, positions, scale, sliding_window, softcap, out, tasks_kernel):
    """Attention of q: [n, heads, head_dim], token t the query of sequence t at positions[t], over its sequence's
    cached keys (block_tables[t]); tasks_kernel: DecodeLayerPlan.tasks_kernel's."""
    num_tokens = q.shape[0]
    context_lens = np.empty(num_tokens, dtype=np.int32)
    keys_seen = 0
    for t in range(num_tokens):
        context_lens[t] = positions[t] + 1
        keys_seen += context_lens[t] if sliding_window <= 0 else min(context_lens[t], sliding_window)
    query_start_loc = np.arange(num_tokens + 1).astype(np.int32)
    token_seq = np.arange(num_tokens)
    threads = pool_threads()
    # paged_attention's work estimate, with a lower threshold: the layer's mat-vecs have just woken the pool
    if keys_seen * q.shape[1] * q.shape[2] * 2 < ATTENTION_MIN_WORK:
        threads = 1
    attend_tokens(q, k_cache, v_cache, kv_type, block_tables, context_lens, query_start_loc, token_seq, scale,
                  sliding_window, softcap, out, np.int64(0), np.int64(num_tokens), np.int64(threads), tasks_kernel)


@njit(cache=True)
def _project_heads(y, bias, norm, num_heads, head_dim, eps):
    """y: [n, heads * head_dim] -> [n, heads, head_dim] (+ bias, per-head rms_norm), in place."""
    num_tokens = y.shape[0]
    for t in range(num_tokens if bias.size else 0):
        for j in range(bias.size):
            y[t, j] += bias[j]
    heads = y.reshape(num_tokens * num_heads, head_dim)
    _norm_rows_into(heads, norm, eps, heads)
    return y.reshape(num_tokens, num_heads, head_dim)


@njit(cache=True, nogil=True)
def decode_layer_into(x, mats, kernels, norms, biases, inv_freq, is_neox, num_heads, num_kv_heads, head_dim, eps,
                      activation, k_cache, v_cache, kv_type, block_tables, positions, slots, scale, sliding_window,
                      softcap, tasks_kernel, mixed_paths):
    """x: float32 [n, hidden], token t at positions[t] of sequence t (block_tables[t]), updated in place to the
    layer's output; its k/v go to cache slot slots[t] (caches of KV type kv_type). activation: activation.SILU or
    GELU_TANH (gated by up). tasks_kernel: the attention's (DecodeLayerPlan.tasks_kernel). mixed_paths: None where
    every kernel takes the run path (DecodeLayerPlan.mixed_paths): the mat-vecs then compile the run path's glue
    alone (dispatch.layer_linear_into); True otherwise."""
    num_tokens = x.shape[0]
    h = np.empty_like(x)
    _norm_rows_into(x, norms[ATTN_NORM], eps, h)
    q = np.empty((num_tokens, mats[Q].shape[0]), dtype=np.float32)
    k = np.empty((num_tokens, mats[K].shape[0]), dtype=np.float32)
    v = np.empty((num_tokens, mats[V].shape[0]), dtype=np.float32)
    shared_input_linear_into(kernels, mats, Q, h, (q, k, v), mixed_paths)
    q3 = _project_heads(q, biases[Q], norms[Q_NORM], num_heads, head_dim, eps)
    k3 = _project_heads(k, biases[K], norms[K_NORM], num_kv_heads, head_dim, eps)
    v3 = _project_heads(v, biases[V], np.empty(0, dtype=np.float32), num_kv_heads, head_dim, eps)
    cos, sin = rope_tables(positions, inv_freq, np.int64(0), num_tokens)  # once for q and k
    rotate_tokens_into(q3, cos, sin, is_neox, q3, np.int64(0), num_tokens)
    rotate_tokens_into(k3, cos, sin, is_neox, k3, np.int64(0), num_tokens)
    store_kv_into(k3, v3, k_cache, v_cache, slots, kv_type)
    attended = np.empty_like(q3)
    _attend(q3, k_cache, v_cache, kv_type, block_tables, positions, scale, sliding_window, softcap, attended,
            tasks_kernel)
    o = np.empty_like(x)
    layer_linear_into(kernels[O], mats[O], attended.reshape(num_tokens, attended.shape[1] * head_dim), o,
                      mixed_paths)
    _norm_rows_into(o, norms[POST_ATTN_NORM], eps, o)
    _add_into(x.reshape(x.size), o.reshape(o.size))
    _norm_rows_into(x, norms[FFN_NORM], eps, h)
    gate = np.empty((num_tokens, mats[GATE].shape[0]), dtype=np.float32)
    up = np.empty_like(gate)
    gated_linear_into(kernels, mats, GATE, h, gate, up, activation, mixed_paths)
    layer_linear_into(kernels[DOWN], mats[DOWN], gate, o, mixed_paths)
    _norm_rows_into(o, norms[POST_FFW_NORM], eps, o)
    _add_into(x.reshape(x.size), o.reshape(o.size))


@njit(cache=True)
def decode_layer_tail_into(x, mats, kernels, norms, biases, inv_freq, is_neox, num_heads, num_kv_heads, head_dim, eps,
                           activation, k_cache, v_cache, kv_type, block_tables, positions, slots, scale,
                           sliding_window, softcap, tasks_kernel, mixed_paths):
    """decode_layer_into's calls from its end back (the gated FFN, the attention, the heads' projection), on new
    scratch arrays of the types decode_layer_into gives them, for compiling only (Dispatcher.compile, never run):
    the kernels it compiles are decode_layer_into's own, found in numba's cache by a side child compiling
    decode_layer_into from its start (pocketcli/commands/first_run.py: the tail child)."""
    num_tokens = x.shape[0]
    h = np.empty_like(x)
    gate = np.empty((num_tokens, mats[GATE].shape[0]), dtype=np.float32)
    gated_linear_into(kernels, mats, GATE, h, gate, np.empty_like(gate), activation, mixed_paths)
    _add_into(x.reshape(x.size), h.reshape(h.size))
    q3 = np.empty((num_tokens, num_heads, head_dim), dtype=np.float32)
    _attend(q3, k_cache, v_cache, kv_type, block_tables, positions, scale, sliding_window, softcap,
            np.empty_like(q3), tasks_kernel)
    _project_heads(np.empty((num_tokens, num_heads * head_dim), dtype=np.float32), biases[Q], norms[Q_NORM],
                   num_heads, head_dim, eps)


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
    max_tokens: int  # the most decode tokens one call serves: the fused mat-vecs' limit over the layer's types
    # the mats' LinearKernels by token count (dispatch.linear_kernel), looked up once per count
    kernels_by_tokens: dict = field(default_factory=dict, compare=False, repr=False)

    # the attention's tasks kernel for the last caches seen: (their key, the handle)
    last_tasks_kernel: list = field(default_factory=lambda: [None, None], compare=False, repr=False)
    # the first layer's plan keeps the model's decode_stack.DecodeStack for each token count here
    stacks: dict = field(default_factory=dict, compare=False, repr=False)

    def kernels(self, num_tokens: int) -> tuple:
        kernels = self.kernels_by_tokens.get(num_tokens)
        if kernels is None:
            kernels = tuple(linear_kernel(code, num_tokens) for code in self.codes)
            self.kernels_by_tokens[num_tokens] = kernels
        return kernels

    def mixed_paths(self, num_tokens: int) -> bool | None:
        """decode_layer_into's mixed_paths for num_tokens tokens: the paths of its kernels, looked up once a count."""
        return mixed_paths_of(kernel[0] for kernel in self.kernels(num_tokens))

    def tasks_kernel(self, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray) -> np.ndarray:
        """attention.attend_tasks_kernel's handle for the decode layer's attention over these caches (its other
        arguments are the layer's own arrays, always of one type), looked up again only when the caches or the
        block tables' type change."""
        key = (id(k_cache), id(v_cache), k_cache.dtype, v_cache.dtype, block_tables.dtype, block_tables.ndim,
               block_tables.flags.c_contiguous, block_tables.flags.writeable)
        if self.last_tasks_kernel[0] != key:
            heads = types.Array(types.float32, 3, "C")  # _attend's q and out
            int32s = types.Array(types.int32, 1, "C")  # its context lengths and query starts
            self.last_tasks_kernel[:] = key, attend_tasks_kernel(
                heads, k_cache, v_cache, types.int64, block_tables, int32s, int32s, types.Array(types.int64, 1, "C"),
                numba.typeof(self.scale), types.int64, numba.typeof(self.softcap), heads)
        return self.last_tasks_kernel[1]


def mixed_paths_of(paths) -> bool | None:
    """decode_layer_into's mixed_paths for matrices taking these paths (dispatch.linear_path): None where all seven
    take the run path (the common case on the 8-bit dot tiers), else True."""
    return None if all(path == RUN for path in paths) else True


def fused_codes(mats: tuple[WeightTensor, ...]) -> tuple[int, ...] | None:
    """The type codes plan_decode_layer's plan for these weights would hold, read from their types alone (nothing
    is repacked), or None where it makes no plan: a weight without a fused dot (FP8, or F32 which linear sends to
    BLAS)."""
    if any(w.fp8 is not None or qt.TYPE_CODES.get(w.ggml_type, qt.F32) == qt.F32 for w in mats):
        return None
    return tuple(kernel_code(w) for w in mats)


def type_plan(codes: tuple[int, ...]) -> DecodeLayerPlan:
    """A DecodeLayerPlan of tiny arrays holding every value as a real plan types it, for compiling
    decode_layer_into from types (decode_stack.compile_decode_step): its kernels carry no leaf handles (their
    type alone counts), so no leaf compiles for it. Never run."""
    weights = np.zeros((1, 1), dtype=np.uint8)
    weights.flags.writeable = False  # as cpu_operands gives them
    norm = _vector(np.zeros(1, dtype=np.float32))
    plan = DecodeLayerPlan((weights,) * len(codes), codes, (norm,) * 6, (norm,) * 3, rope_inv_freq(2, 10000.0),
                           False, 1, 1, 2, 1e-6, SILU, np.float32(1.0), 0, np.float32(0.0),
                           min(max_fused_tokens(code) for code in codes))
    no_leaves = handles_array([NO_KERNEL] * 4)
    for num_tokens in range(1, plan.max_tokens + 1):
        plan.kernels_by_tokens[num_tokens] = tuple((linear_path(code, num_tokens), code, no_leaves) for code in codes)
    return plan


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
    if fused_codes(mats) is None:
        return None
    codes, datas = zip(*(cpu_operands(w) for w in mats))
    return DecodeLayerPlan(
        tuple(datas), tuple(codes),
        tuple(_vector(v) for v in norms), tuple(_vector(v) for v in biases),
        rope_inv_freq(head_dim, rope_theta, rope_freq_scale, rope_freq_factors), bool(is_neox), num_heads,
        num_kv_heads, head_dim, float(eps), GELU_TANH if activation == "gelu" else SILU, np.float32(scale),
        int(sliding_window), np.float32(softcap), min(max_fused_tokens(code) for code in codes))


def decode_layer(x: np.ndarray, plan: DecodeLayerPlan, k_cache: np.ndarray, v_cache: np.ndarray,
                 block_tables: np.ndarray, positions: np.ndarray, slots: np.ndarray) -> None:
    """The layer of n decode tokens, in place on x: float32 [n, hidden] (n <= plan.max_tokens), token t the next
    of sequence t: block_tables int32 [n, blocks], positions and cache slots int64 [n]."""
    p = plan
    decode_layer_into(x, p.mats, p.kernels(x.shape[0]), p.norms, p.biases, p.inv_freq, p.is_neox, p.num_heads,
                      p.num_kv_heads, p.head_dim, p.eps, p.activation, k_cache, v_cache, kv_type_of(k_cache),
                      block_tables, positions, slots, p.scale, p.sliding_window, p.softcap,
                      p.tasks_kernel(k_cache, v_cache, block_tables), p.mixed_paths(x.shape[0]))
