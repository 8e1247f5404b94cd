"""Gated DeltaNet ops (numba CPU): short causal conv + SiLU, the delta rule token by token (decode) and chunk by
chunk (prefill). Same signatures as kernels_numba/reference_deltanet.py; states are float32, updated in place."""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.parallel_policy import use_threads
from kernels_numba.reference_deltanet import DEFAULT_CHUNK_SIZE


def _run_parallel(kernel, work: int, *args) -> None:
    """A prange kernel over heads: on the pool when `work` is worth waking it, else on this thread only."""
    if use_threads(work):
        kernel(*args)
        return
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        kernel(*args)
    finally:
        numba.set_num_threads(threads)


@njit(cache=True, nogil=True)
def conv1d_silu_into(x, weight, conv_state, out):
    num_tokens, channels = x.shape
    taps = weight.shape[1]
    history = taps - 1
    for t in range(num_tokens):
        for c in range(channels):
            total = np.float32(0.0)
            for j in range(taps):
                src = t - history + j  # < 0: from the state
                value = conv_state[history + src, c] if src < 0 else x[src, c]
                total += weight[c, j] * value
            out[t, c] = total / (np.float32(1.0) + np.exp(-total))
    # the state becomes the last K-1 inputs (state rows first, then x)
    keep = np.empty((history, channels), dtype=np.float32)
    for r in range(history):
        src = num_tokens + r  # row r of the new state is history row num_tokens + r of [state; x]
        for c in range(channels):
            keep[r, c] = conv_state[src, c] if src < history else x[src - history, c]
    conv_state[:, :] = keep


def conv1d_silu(x: np.ndarray, weight: np.ndarray, conv_state: np.ndarray) -> np.ndarray:
    """x: [T, C], weight: [C, K], conv_state: [K-1, C] (float32, updated) -> silu(causal depthwise conv) [T, C]."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    conv1d_silu_into(x, np.ascontiguousarray(weight, dtype=np.float32), conv_state, out)
    return out


@njit(cache=True, nogil=True, parallel=True, fastmath=SUM_FASTMATH)
def recurrent_into(q, k, v, g, beta, state, out):
    """Per head and token, two passes over S: decay + read (kv_mem = S^T k), then write + output (o = S^T q)."""
    num_tokens, num_heads, key_dim = q.shape
    value_dim = v.shape[2]
    for h in prange(num_heads):
        s = state[h]
        kv_mem = np.empty(value_dim, dtype=np.float32)
        delta = np.empty(value_dim, dtype=np.float32)
        o = np.empty(value_dim, dtype=np.float32)
        for t in range(num_tokens):
            decay = np.float32(np.exp(g[t, h]))
            kv_mem[:] = 0.0
            for i in range(key_dim):
                ki = k[t, h, i]
                for j in range(value_dim):
                    s[i, j] *= decay
                    kv_mem[j] += s[i, j] * ki
            for j in range(value_dim):
                delta[j] = (v[t, h, j] - kv_mem[j]) * beta[t, h]
            o[:] = 0.0
            for i in range(key_dim):
                ki, qi = k[t, h, i], q[t, h, i]
                for j in range(value_dim):
                    s[i, j] += ki * delta[j]
                    o[j] += s[i, j] * qi
            out[t, h, :] = o


def _as32(*arrays):
    return tuple(np.ascontiguousarray(a, dtype=np.float32) for a in arrays)


def gated_delta_rule_recurrent(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                               state: np.ndarray) -> np.ndarray:
    """q, k: [T, H, d_k], v: [T, H, d_v], g, beta: [T, H], state: float32 [H, d_k, d_v] -> o [T, H, d_v]."""
    q, k, v, g, beta = _as32(q, k, v, g, beta)
    out = np.empty(v.shape, dtype=np.float32)
    _run_parallel(recurrent_into, 3 * state.size * len(q), q, k, v, g, beta, state, out)
    return out


@njit(cache=True, nogil=True, fastmath=SUM_FASTMATH)
def chunk_head_into(q, k, v, g, beta, s, out):
    """One chunk of one head in the WY form; q, k: [L, d_k], v, out: [L, d_v], s: [d_k, d_v] (updated).
    Every decay factor is exp of a non-positive number (cumulative log decays), so float32 is safe."""
    length, key_dim = q.shape
    value_dim = v.shape[1]
    cum = np.cumsum(g)
    qk = np.zeros((length, length), dtype=np.float32)  # (q_i . k_j) exp(cum_i - cum_j), j <= i
    kk = np.zeros((length, length), dtype=np.float32)  # beta_i (k_i . k_j) exp(cum_i - cum_j), j < i
    for i in range(length):
        for j in range(i + 1):
            dot_q, dot_k = np.float32(0.0), np.float32(0.0)
            for d in range(key_dim):
                dot_q += q[i, d] * k[j, d]
                dot_k += k[i, d] * k[j, d]
            decay = np.float32(np.exp(cum[i] - cum[j]))
            qk[i, j] = dot_q * decay
            kk[i, j] = beta[i] * dot_k * decay if j < i else np.float32(0.0)
    # forward substitution with the unit lower-triangular system I + kk, then v_new = u - w s:
    # u = system^-1 (beta v), w = system^-1 (beta k exp(cum))
    v_new = np.empty((length, value_dim), dtype=np.float32)
    w = np.empty((length, key_dim), dtype=np.float32)
    for i in range(length):
        for j in range(value_dim):
            v_new[i, j] = beta[i] * v[i, j]
        scale = beta[i] * np.float32(np.exp(cum[i]))
        for d in range(key_dim):
            w[i, d] = scale * k[i, d]
        for m in range(i):
            c = kk[i, m]
            for j in range(value_dim):
                v_new[i, j] -= c * v_new[m, j]
            for d in range(key_dim):
                w[i, d] -= c * w[m, d]
    for i in range(length):
        for d in range(key_dim):
            c = w[i, d]
            for j in range(value_dim):
                v_new[i, j] -= c * s[d, j]
    acc = np.empty(value_dim, dtype=np.float32)
    for i in range(length):  # o_i = exp(cum_i) q_i S + sum_{m <= i} qk[i, m] v_new_m
        acc[:] = 0.0
        scale = np.float32(np.exp(cum[i]))
        for d in range(key_dim):
            c = q[i, d] * scale
            for j in range(value_dim):
                acc[j] += c * s[d, j]
        for m in range(i + 1):
            c = qk[i, m]
            for j in range(value_dim):
                acc[j] += c * v_new[m, j]
        out[i, :] = acc
    last = cum[length - 1]
    chunk_decay = np.float32(np.exp(last))
    for d in range(key_dim):  # S <- exp(cum_L) S + (k exp(cum_L - cum))^T v_new
        for j in range(value_dim):
            s[d, j] *= chunk_decay
    for i in range(length):
        scale = np.float32(np.exp(last - cum[i]))
        for d in range(key_dim):
            c = k[i, d] * scale
            for j in range(value_dim):
                s[d, j] += c * v_new[i, j]


@njit(cache=True, nogil=True, parallel=True)
def chunked_into(q, k, v, g, beta, state, out, chunk_size):
    num_tokens, num_heads = g.shape
    for h in prange(num_heads):
        head_out = np.empty((num_tokens, v.shape[2]), dtype=np.float32)
        for start in range(0, num_tokens, chunk_size):
            stop = min(start + chunk_size, num_tokens)
            chunk_head_into(np.ascontiguousarray(q[start:stop, h]), np.ascontiguousarray(k[start:stop, h]),
                            np.ascontiguousarray(v[start:stop, h]), np.ascontiguousarray(g[start:stop, h]),
                            np.ascontiguousarray(beta[start:stop, h]), state[h], head_out[start:stop])
        out[:, h] = head_out


def gated_delta_rule_chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                             state: np.ndarray, chunk_size: int = DEFAULT_CHUNK_SIZE) -> np.ndarray:
    """The same result as gated_delta_rule_recurrent, computed chunk by chunk (prefill)."""
    q, k, v, g, beta = _as32(q, k, v, g, beta)
    out = np.empty(v.shape, dtype=np.float32)
    _run_parallel(chunked_into, 3 * state.size * len(q), q, k, v, g, beta, state, out, int(chunk_size))
    return out


@njit(cache=True, nogil=True)
def l2_normalize_into(x, eps, out):
    for r in range(x.shape[0]):
        total = np.float32(0.0)
        for c in range(x.shape[1]):
            total += x[r, c] * x[r, c]
        inv = np.float32(1.0 / np.sqrt(total + eps))
        for c in range(x.shape[1]):
            out[r, c] = x[r, c] * inv


def l2_normalize(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x * rsqrt(sum(x^2) + eps) over the last axis."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    l2_normalize_into(x.reshape(-1, x.shape[-1]), np.float32(eps), out.reshape(-1, x.shape[-1]))
    return out
