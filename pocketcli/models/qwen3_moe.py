"""Qwen3-MoE: Qwen3 attention (q/k norms, NeoX RoPE) with a routed mixture-of-experts feed-forward.

A router (ffn_gate_inp) scores every expert; each token runs its top-k experts (softmax, renormalised when the
model says so) and sums their SwiGLU outputs weighted by the routing probabilities. Shared experts (Qwen3-Next,
Qwen3.5-MoE: ffn_*_shexp, gated by sigmoid(ffn_gate_inp_shexp)) run on every token. Expert weights stay stacked
and quantized; ops.moe_linear reads only the chosen experts' rows. Layers without a router are dense (HF
mlp_only_layers / decoder_sparse_step).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf_loader import GGUFFile, WeightTensor

from .base import DecoderModel, LayerWeights, float_vector, stack_same_type_runs


@dataclass
class ExpertWeights:
    router: WeightTensor  # (num_experts, D)
    gate: WeightTensor  # (num_experts, I, D), stacked
    up: WeightTensor  # (num_experts, I, D)
    down: WeightTensor  # (num_experts, D, I)
    top_k: int
    normalize: bool  # renormalise the top-k probabilities (norm_topk_prob)
    shared_gate: WeightTensor | None = None  # shared expert SwiGLU, on every token
    shared_up: WeightTensor | None = None
    shared_down: WeightTensor | None = None
    shared_router: WeightTensor | None = None  # (1, D): sigmoid gate of the shared expert's output


@dataclass
class MoELayerWeights(LayerWeights):
    experts: ExpertWeights | None = None  # None: a dense layer (w_gate, w_up, w_down)

    def __post_init__(self):
        self.qkv_groups = stack_same_type_runs((self.wq, self.wk, self.wv))
        self.gate_up_groups = () if self.w_gate is None else stack_same_type_runs((self.w_gate, self.w_up))


def load_experts(model: DecoderModel, f: GGUFFile, i: int) -> ExpertWeights | None:
    """The layer's routed (and shared) experts, or None when the layer has no router."""
    if not f.has_tensor(f"blk.{i}.ffn_gate_inp.weight"):
        return None
    extra = model.hparams.extra

    def required(name: str) -> WeightTensor:
        return model._tensor(f, f"blk.{i}.{name}.weight")

    def optional(name: str) -> WeightTensor | None:
        return f.tensor(f"blk.{i}.{name}.weight") if f.has_tensor(f"blk.{i}.{name}.weight") else None

    return ExpertWeights(
        router=required("ffn_gate_inp"), gate=required("ffn_gate_exps"), up=required("ffn_up_exps"),
        down=required("ffn_down_exps"), top_k=int(extra["expert_used_count"]),
        normalize=bool(extra["expert_weights_norm"]),
        shared_gate=optional("ffn_gate_shexp"), shared_up=optional("ffn_up_shexp"),
        shared_down=optional("ffn_down_shexp"), shared_router=optional("ffn_gate_inp_shexp"),
    )


def apply_experts(ops: Any, e: ExpertWeights, h: np.ndarray) -> np.ndarray:
    """h: [T, D] -> sum over each token's top-k experts of weight * SwiGLU_expert(h) (+ the shared expert)."""
    expert_ids, weights = ops.moe_route(ops.linear(h, e.router), e.top_k, e.normalize)  # [T, k] each
    flat_ids = expert_ids.reshape(-1)  # token-major: row t * k + j is token t's j-th expert
    rows = ops.repeat_rows(h, e.top_k)  # [T * k, D]
    act = ops.silu_mul(ops.moe_linear(rows, e.gate, flat_ids), ops.moe_linear(rows, e.up, flat_ids))
    out = ops.moe_combine(ops.moe_linear(act, e.down, flat_ids), weights)  # [T, D]
    if e.shared_gate is not None:
        shared = ops.linear(ops.silu_mul(ops.linear(h, e.shared_gate), ops.linear(h, e.shared_up)), e.shared_down)
        if e.shared_router is not None:
            shared = ops.sigmoid_mul(shared, ops.linear(h, e.shared_router))  # [T, 1] gate per token
        out = ops.add(out, shared)
    return out


class Qwen3MoeModel(DecoderModel):
    activation = "silu"

    def _load_layer(self, f: GGUFFile, i: int) -> LayerWeights:
        experts = load_experts(self, f, i)
        if experts is None:
            return super()._load_layer(f, i)

        def required(name: str) -> WeightTensor:
            return self._tensor(f, f"blk.{i}.{name}.weight")

        def optional_vector(name: str) -> np.ndarray | None:
            return float_vector(f.tensor(f"blk.{i}.{name}")) if f.has_tensor(f"blk.{i}.{name}") else None

        return MoELayerWeights(
            attn_norm=float_vector(required("attn_norm")),
            wq=required("attn_q"), wk=required("attn_k"), wv=required("attn_v"), wo=required("attn_output"),
            ffn_norm=float_vector(required("ffn_norm")), w_gate=None, w_up=None, w_down=None,
            q_norm=optional_vector("attn_q_norm.weight"), k_norm=optional_vector("attn_k_norm.weight"),
            experts=experts,
        )

    def _feed_forward(self, w: LayerWeights, h: np.ndarray) -> np.ndarray:
        experts = getattr(w, "experts", None)
        if experts is None:
            return super()._feed_forward(w, h)
        return apply_experts(self.ops, experts, h)
