"""Mixture-of-experts ops in plain numpy: the oracle for kernels_numba/cpu/moe.py.

Stacked expert weights are one WeightTensor of shape (num_experts, rows, cols) whose data holds the experts'
rows one expert after another ([num_experts * rows, bytes_per_row]), as GGUF's `ffn_*_exps` tensors store them.
"""
from __future__ import annotations

import numpy as np

from gguf_loader.weight_tensor import WeightTensor


def expert_view(w: WeightTensor, expert: int) -> WeightTensor:
    """Expert `expert` of stacked weights as a (rows, cols) WeightTensor: a zero-copy slice of its rows."""
    num_rows = w.shape[-2]
    rows = w.data[expert * num_rows:(expert + 1) * num_rows]
    return WeightTensor(f"{w.name}[{expert}]", w.ggml_type, (num_rows, w.shape[-1]), rows)


def moe_route(router_logits: np.ndarray, top_k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """router_logits: [n, num_experts] -> (expert ids int64 [n, top_k], weights float32 [n, top_k]).

    Softmax over all experts, the top_k largest probabilities (ties: lower expert id first), renormalised to sum
    to 1 when `normalize` (Qwen3-MoE's norm_topk_prob)."""
    logits = np.asarray(router_logits, dtype=np.float64)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    expert_ids = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
    weights = np.take_along_axis(probs, expert_ids, axis=-1)
    if normalize:
        weights /= weights.sum(axis=-1, keepdims=True)
    return expert_ids.astype(np.int64), weights.astype(np.float32)


def moe_linear(x: np.ndarray, w: WeightTensor, expert_ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Row i of the result = x[i] @ W[expert_ids[i]].T, with x: [r, cols], w: (num_experts, rows, cols) -> [r, rows].

    Only the experts named in expert_ids are decoded; the rows routed to one expert are multiplied together."""
    from kernels_numba.reference import linear

    expert_ids = np.asarray(expert_ids, dtype=np.int64).reshape(-1)
    if out is None:
        out = np.empty((x.shape[0], w.shape[-2]), dtype=np.float32)
    for expert in np.unique(expert_ids):
        rows = np.flatnonzero(expert_ids == expert)
        out[rows] = linear(np.asarray(x)[rows], expert_view(w, int(expert)))
    return out


def moe_combine(expert_out: np.ndarray, weights: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """expert_out: [n * top_k, d] (token-major), weights: [n, top_k] -> the weighted sum per token [n, d]."""
    n, top_k = weights.shape
    y = np.asarray(expert_out, dtype=np.float64).reshape(n, top_k, -1)
    result = (y * np.asarray(weights, dtype=np.float64)[:, :, None]).sum(axis=1)
    if out is None:
        return result.astype(np.float32)
    out[...] = result
    return out
