"""DeepSeek-V3 (llama.cpp arch `deepseek2`): multi-head latent attention (MLA) and sigmoid-routed experts, plus
the `nextn` MTP layer(s) stored after the main layers (HF model.layers.{num_hidden_layers}.*).

* MLA (HF DeepseekV3Attention): q = q_b(RMSNorm(q_a(h))) (or q_proj), [H, nope + rope] per head; kv_a(h) gives
  a latent c (kv_lora_rank, RMSNorm'd) and one shared rope key k_pe; kv_b(c) gives per head k_nope and v. RoPE
  rotates the interleaved pairs of the rope dims (HF rope_interleave; the same pairs as llama.cpp's normal mode).
  The K/V are expanded per head into the paged cache: K = [k_nope | k_pe], V padded to K's width and cut after.
* Router (HF DeepseekV3TopkRouter, "noaux_tc"): s = sigmoid(W_gate h); experts are chosen by s + bias inside the
  topk_group best groups (a group scores the sum of its two best), weighted by s renormalised (norm_topk_prob)
  times routed_scaling_factor; shared experts run on every token. The first first_k_dense_replace layers are dense.
* MTP: [enorm(emb), hnorm(h)] -> eh_proj -> a DeepSeek-V3 block -> shared_head.norm -> the target's head; the
  embedding is zeroed at position 0 (vLLM / SGLang deepseek_mtp).
Not supported yet: YaRN rope scaling (every released DeepSeek-V3 uses it; hf_config refuses it), the absorbed
(latent-cache) form of MLA, GGUFs that split attn_kv_b into attn_k_b / attn_v_b (recent llama.cpp converters);
GGUFs with attn_kv_b and llama.cpp's names load (llama.cpp's own converter drops the nextn layer, so theirs have none).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf_loader import GGUFFile, UnsupportedModelError, WeightTensor
from gguf_loader.hparams import ModelHParams

from .attn_metadata import AttnMetadata
from .base import DecoderModel, float_vector
from .mtp_block import MTPModelMixin

SIGMOID_GATING = 2  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (deepseek2.expert_gating_func)


@dataclass
class MLAWeights:
    kv_a: WeightTensor  # [kv_lora + rope, D]
    kv_a_norm: np.ndarray
    kv_b: WeightTensor  # [H * (nope + v), kv_lora]
    wo: WeightTensor  # [D, H * v]
    q: WeightTensor | None = None  # [H * (nope + rope), D], without a q LoRA
    q_a: WeightTensor | None = None  # [q_lora, D]
    q_a_norm: np.ndarray | None = None
    q_b: WeightTensor | None = None  # [H * (nope + rope), q_lora]


@dataclass
class SigmoidExperts:
    router: WeightTensor  # [E, D]
    selection_bias: np.ndarray  # [E]: e_score_correction_bias, for choosing only
    gate: WeightTensor  # (E, I, D) stacked
    up: WeightTensor
    down: WeightTensor  # (E, D, I)
    shared_gate: WeightTensor | None
    shared_up: WeightTensor | None
    shared_down: WeightTensor | None


@dataclass
class DeepseekLayerWeights:
    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    mla: MLAWeights
    w_gate: WeightTensor | None = None  # dense layers
    w_up: WeightTensor | None = None
    w_down: WeightTensor | None = None
    experts: SigmoidExperts | None = None
    post_attn_norm: None = None  # what DecoderModel._layer_forward asks of every layer
    post_ffw_norm: None = None


@dataclass(frozen=True)
class RouterConfig:
    top_k: int
    num_groups: int
    top_groups: int
    normalize: bool
    scale: float


def route_sigmoid_grouped(logits: np.ndarray, bias: np.ndarray, cfg: RouterConfig) -> tuple[np.ndarray, np.ndarray]:
    """router logits [T, E] -> (expert ids int64 [T, k], weights float32 [T, k]) as DeepSeek-V3 routes."""
    scores = 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))
    choice = scores + bias
    num_tokens, num_experts = choice.shape
    grouped = choice.reshape(num_tokens, cfg.num_groups, num_experts // cfg.num_groups)
    group_scores = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)  # [T, groups]: the two best of each group
    kept_groups = np.argsort(-group_scores, axis=-1, kind="stable")[:, :cfg.top_groups]
    keep = np.zeros_like(group_scores, dtype=bool)
    np.put_along_axis(keep, kept_groups, True, axis=-1)
    choice = np.where(np.repeat(keep, num_experts // cfg.num_groups, axis=-1), choice, -np.inf)
    expert_ids = np.argsort(-choice, axis=-1, kind="stable")[:, :cfg.top_k]
    weights = np.take_along_axis(scores, expert_ids, axis=-1)
    if cfg.normalize:
        weights /= weights.sum(axis=-1, keepdims=True) + 1e-20
    return expert_ids.astype(np.int64), (weights * cfg.scale).astype(np.float32)


class DeepseekV3Model(MTPModelMixin, DecoderModel):
    mtp_zero_embedding_at_position_0 = True

    def __init__(self, model_file: GGUFFile, hparams: ModelHParams, ops: Any):
        meta, p = model_file.metadata, "deepseek2."
        if int(meta.get(p + "expert_gating_func", SIGMOID_GATING)) != SIGMOID_GATING:
            raise UnsupportedModelError(f"{model_file.path}: deepseek2 with softmax expert gating (DeepSeek-V2) is "
                                        f"not supported; DeepSeek-V3's sigmoid gating is")
        self.value_dim = int(meta[p + "attention.value_length"])
        self.rope_dim = int(meta[p + "rope.dimension_count"])
        self.kv_lora_rank = int(meta[p + "attention.kv_lora_rank"])
        self.router = RouterConfig(
            top_k=int(meta[p + "expert_used_count"]), num_groups=int(meta.get(p + "expert_group_count", 1)),
            top_groups=int(meta.get(p + "expert_group_used_count", 1)),
            normalize=bool(meta.get(p + "expert_weights_norm", True)),
            scale=float(meta.get(p + "expert_weights_scale", 1.0)))
        super().__init__(model_file, hparams, ops)
        self._split_mtp_layers(model_file, int(meta.get(p + "nextn_predict_layers", 0)))

    # --- loading -------------------------------------------------------------------------------------------
    def _load_layer(self, f: GGUFFile, i: int) -> DeepseekLayerWeights:
        def required(name: str) -> WeightTensor:
            return self._tensor(f, f"blk.{i}.{name}.weight")

        def optional(name: str) -> WeightTensor | None:
            return f.tensor(f"blk.{i}.{name}.weight") if f.has_tensor(f"blk.{i}.{name}.weight") else None

        has_q_lora = f.has_tensor(f"blk.{i}.attn_q_a.weight")
        mla = MLAWeights(kv_a=required("attn_kv_a_mqa"), kv_a_norm=float_vector(required("attn_kv_a_norm")),
                         kv_b=required("attn_kv_b"), wo=required("attn_output"),
                         q=None if has_q_lora else required("attn_q"),
                         q_a=optional("attn_q_a"), q_b=optional("attn_q_b"),
                         q_a_norm=float_vector(required("attn_q_a_norm")) if has_q_lora else None)
        norms = dict(attn_norm=float_vector(required("attn_norm")), ffn_norm=float_vector(required("ffn_norm")))
        if not f.has_tensor(f"blk.{i}.ffn_gate_inp.weight"):
            return DeepseekLayerWeights(**norms, mla=mla, w_gate=required("ffn_gate"), w_up=required("ffn_up"),
                                        w_down=required("ffn_down"))
        experts = SigmoidExperts(
            router=required("ffn_gate_inp"), selection_bias=float_vector(self._tensor(f, f"blk.{i}.exp_probs_b.bias")),
            gate=required("ffn_gate_exps"), up=required("ffn_up_exps"), down=required("ffn_down_exps"),
            shared_gate=optional("ffn_gate_shexp"), shared_up=optional("ffn_up_shexp"),
            shared_down=optional("ffn_down_shexp"))
        return DeepseekLayerWeights(**norms, mla=mla, experts=experts)

    # --- forward -------------------------------------------------------------------------------------------
    def _attention(self, layer_id: int, w: DeepseekLayerWeights, h: np.ndarray, positions: np.ndarray,
                   attn: AttnMetadata, k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, hp, mla = self.ops, self.hparams, w.mla
        num_tokens, heads, qk_dim, eps = h.shape[0], hp.num_heads, hp.head_dim, hp.rms_norm_eps
        nope = qk_dim - self.rope_dim
        if mla.q is not None:
            q = ops.linear(h, mla.q)
        else:
            q = ops.linear(ops.rms_norm(ops.linear(h, mla.q_a), mla.q_a_norm, eps), mla.q_b)
        q = q.reshape(num_tokens, heads, qk_dim)  # [T, H, nope + rope]
        kv_a = ops.linear(h, mla.kv_a)  # [T, kv_lora + rope]
        latent = ops.rms_norm(np.ascontiguousarray(kv_a[:, :self.kv_lora_rank]), mla.kv_a_norm, eps)
        kv = ops.linear(latent, mla.kv_b).reshape(num_tokens, heads, nope + self.value_dim)
        k = np.empty_like(q)
        k[..., :nope] = kv[..., :nope]
        k[..., nope:] = self._rope(np.ascontiguousarray(kv_a[:, None, self.kv_lora_rank:]), positions)  # shared
        q[..., nope:] = self._rope(np.ascontiguousarray(q[..., nope:]), positions)
        v = np.zeros_like(q)  # V padded to K's width: the paged cache holds one head size
        v[..., :self.value_dim] = kv[..., nope:]
        ops.store_kv(k, v, k_cache, v_cache, attn.slot_mapping)
        o = ops.paged_attention(q, k_cache, v_cache, attn.block_tables, attn.context_lens, attn.query_start_loc,
                                1.0 / float(np.sqrt(qk_dim)))
        o = np.ascontiguousarray(o[..., :self.value_dim]).reshape(num_tokens, heads * self.value_dim)
        return ops.linear(o, mla.wo)

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Interleaved pairs (x[2i], x[2i+1]) of the rope dims, x: [T, heads, rope_dim]."""
        return self.ops.rope(x, positions, self.hparams.rope_theta, False)

    def _feed_forward(self, w: DeepseekLayerWeights, h: np.ndarray) -> np.ndarray:
        ops, e = self.ops, w.experts
        if e is None:
            return ops.linear(ops.silu_mul(ops.linear(h, w.w_gate), ops.linear(h, w.w_up)), w.w_down)
        expert_ids, weights = route_sigmoid_grouped(ops.linear(h, e.router), e.selection_bias, self.router)
        flat_ids = expert_ids.reshape(-1)  # token-major: row t * k + j is token t's j-th expert
        rows = np.repeat(h, self.router.top_k, axis=0)
        act = ops.silu_mul(ops.moe_linear(rows, e.gate, flat_ids), ops.moe_linear(rows, e.up, flat_ids))
        out = ops.moe_combine(ops.moe_linear(act, e.down, flat_ids), weights)
        if e.shared_gate is not None:
            out = out + ops.linear(ops.silu_mul(ops.linear(h, e.shared_gate), ops.linear(h, e.shared_up)),
                                   e.shared_down)
        return out
