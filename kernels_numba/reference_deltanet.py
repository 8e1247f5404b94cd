"""Gated DeltaNet ops in plain numpy (float64): the oracle for kernels_numba/cpu/gated_deltanet.py.

Shapes: T tokens of ONE sequence, C conv channels, K conv taps, H value heads (q and k already repeated to the
value heads, l2-normalised, q scaled by d_k^-1/2), d_k key dim, d_v value dim. States are updated in place.
"""
from __future__ import annotations

import numpy as np

DEFAULT_CHUNK_SIZE = 64


def _silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


def conv1d_silu(x: np.ndarray, weight: np.ndarray, conv_state: np.ndarray) -> np.ndarray:
    """Depthwise causal conv then SiLU: y_t[c] = silu(sum_j weight[c, j] * x_{t-K+1+j}[c]).

    x: [T, C], weight: [C, K], conv_state: [K-1, C] the inputs before x (oldest first), updated to the last K-1."""
    taps = weight.shape[1]
    history = np.concatenate([conv_state.astype(np.float64), np.asarray(x, dtype=np.float64)], axis=0)
    w = np.asarray(weight, dtype=np.float64)
    y = np.zeros(np.shape(x), dtype=np.float64)
    for j in range(taps):
        y += history[j:j + len(x)] * w[:, j]
    conv_state[...] = history[len(history) - (taps - 1):]
    return _silu(y).astype(np.float32)


def gated_delta_rule_recurrent(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                               state: np.ndarray) -> np.ndarray:
    """Token by token: S <- exp(g) S; S <- S + k (beta (v - S^T k))^T; o = S^T q.

    q, k: [T, H, d_k], v: [T, H, d_v], g (log decay), beta: [T, H], state: [H, d_k, d_v] -> o [T, H, d_v]."""
    s = state.astype(np.float64)
    out = np.zeros(v.shape, dtype=np.float64)
    for t in range(len(q)):
        s *= np.exp(np.asarray(g[t], dtype=np.float64))[:, None, None]
        kt, vt, qt = (np.asarray(a[t], dtype=np.float64) for a in (k, v, q))
        kv_mem = np.einsum("hkv,hk->hv", s, kt)
        delta = (vt - kv_mem) * np.asarray(beta[t], dtype=np.float64)[:, None]
        s += kt[:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hkv,hk->hv", s, qt)
    state[...] = s
    return out.astype(np.float32)


def _chunk_one_head(q, k, v, g, beta, s):
    """One chunk of one head in the WY form (see specdecode_notes 3.5); returns (o [L, d_v], new state)."""
    cum = np.cumsum(g)
    lower = np.tril(np.ones((len(g), len(g)), dtype=bool))
    decay = np.where(lower, np.exp(np.where(lower, cum[:, None] - cum[None, :], 0.0)), 0.0)  # Γ, i >= j
    k_beta = k * beta[:, None]
    system = np.eye(len(g)) + np.tril(k_beta @ k.T * decay, -1)  # unit lower triangular
    new_values = np.linalg.solve(system, v * beta[:, None])
    k_cumdecay = np.linalg.solve(system, k_beta * np.exp(cum)[:, None])
    v_new = new_values - k_cumdecay @ s
    out = (q * np.exp(cum)[:, None]) @ s + (q @ k.T * decay) @ v_new
    s = s * np.exp(cum[-1]) + (k * np.exp(cum[-1] - cum)[:, None]).T @ v_new
    return out, s


def gated_delta_rule_chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                             state: np.ndarray, chunk_size: int = DEFAULT_CHUNK_SIZE) -> np.ndarray:
    """The same result as gated_delta_rule_recurrent, computed chunk by chunk (prefill)."""
    q64, k64, v64, g64, b64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g, beta))
    out = np.zeros(v.shape, dtype=np.float64)
    for head in range(q.shape[1]):
        s = state[head].astype(np.float64)
        for start in range(0, len(q), chunk_size):
            rows = slice(start, min(start + chunk_size, len(q)))
            out[rows, head], s = _chunk_one_head(q64[rows, head], k64[rows, head], v64[rows, head],
                                                 g64[rows, head], b64[rows, head], s)
        state[head] = s
    return out.astype(np.float32)


def l2_normalize(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x * rsqrt(sum(x^2) + eps) over the last axis (FLA's / transformers' l2norm)."""
    x64 = np.asarray(x, dtype=np.float64)
    return (x64 / np.sqrt((x64 * x64).sum(axis=-1, keepdims=True) + eps)).astype(np.float32)


# ---------------------------------------------------------------- the layer's glue around the delta rule

def _sigmoid64(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def deltanet_gates(b: np.ndarray, alpha: np.ndarray, a: np.ndarray, dt_bias: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per token and value head: (log decay g = a * softplus(alpha + dt_bias), write strength beta = sigmoid(b)).

    b, alpha: [T, H] projections; a (= -exp(A_log)), dt_bias: [H] -> g, beta float32 [T, H]."""
    shifted = np.asarray(alpha, dtype=np.float64) + np.asarray(dt_bias, dtype=np.float64)
    g = np.asarray(a, dtype=np.float64) * np.logaddexp(0.0, shifted)
    return g.astype(np.float32), _sigmoid64(b).astype(np.float32)


def expand_heads(x: np.ndarray, num_heads: int, grouped: bool, scale: float = 1.0) -> np.ndarray:
    """Key heads [T, H_k, d] to value heads [T, num_heads, d], times scale: grouped (HF: head j reads key head
    j // (num_heads / H_k)) or tiled (llama.cpp qwen35 GGUF: head j reads key head j % H_k)."""
    ratio = num_heads // x.shape[1]
    x64 = np.asarray(x, dtype=np.float64) * scale
    expanded = np.repeat(x64, ratio, axis=1) if grouped else np.tile(x64, (1, ratio, 1))
    return expanded.astype(np.float32)


def gated_rms_norm(x: np.ndarray, weight: np.ndarray, z: np.ndarray, eps: float) -> np.ndarray:
    """The DeltaNet output gate: RMSNorm(x) * weight * silu(z), norm over each head's d_v values.

    x: [T, H, d_v] (or any [..., d_v]), z: [T, H * d_v] (x's size) -> float32 of z's shape."""
    x64 = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
    normed = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * np.asarray(weight, np.float64)
    return (normed.reshape(np.shape(z)) * _silu(np.asarray(z, dtype=np.float64))).astype(np.float32)
