"""DeepSeek-V3 (llama.cpp arch `deepseek2`): multi-head latent attention (MLA) and sigmoid-routed experts, plus
the `nextn` MTP layer(s) stored after the main layers (HF model.layers.{num_hidden_layers}.*).

* MLA (HF DeepseekV3Attention): q = q_b(RMSNorm(q_a(h))) (or q_proj), [H, nope + rope] per head; kv_a(h) gives
  a latent c (kv_lora_rank, RMSNorm'd) and one shared rope key k_pe; kv_b(c) gives per head k_nope and v. RoPE
  rotates the interleaved pairs of the rope dims (HF rope_interleave; the same pairs as llama.cpp's normal mode).
  Absorbed (the default, DeepSeek's / vLLM's MLA decode): the cache holds [c | k_pe] once per token (one shared
  KV head, kv_lora + rope floats); W_UK goes into the query (q_nope W_UK . c = q_nope . k_nope) and W_UV after the
  attention (softmax @ c, then W_UV per head). Expanded (absorb_mla False, HF's order of operations): per-head
  K = [k_nope | k_pe] and V (padded to K's width) for every cached token.
* YaRN rope scaling (gguf_loader/yarn_rope.py): frequency factors for the rope kernels, cos/sin times
  attention_factor, softmax scale times mscale(factor, mscale_all_dim)^2.
* Router (HF DeepseekV3TopkRouter, "noaux_tc"): s = sigmoid(W_gate h); experts are chosen by s + bias inside the
  topk_group best groups (a group scores the sum of its two best), weighted by s renormalised (norm_topk_prob)
  times routed_scaling_factor; shared experts run on every token. The first first_k_dense_replace layers are dense.
* MTP: [enorm(emb), hnorm(h)] -> eh_proj -> a DeepSeek-V3 block -> shared_head.norm -> the target's head; the
  embedding is zeroed at position 0 (vLLM / SGLang deepseek_mtp).
GGUFs load with attn_kv_b (expanded or absorbed) or, as recent llama.cpp converters write them, with attn_k_b /
attn_v_b (absorbed only); llama.cpp's own converter drops the nextn layer, so theirs have none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf import GGMLQuantizationType

from gguf_loader import GGUFFile, ModelFileError, UnsupportedModelError, WeightTensor, make_weight_tensor
from gguf_loader.hparams import ModelHParams
from gguf_loader.yarn_rope import yarn_from_gguf

from .attn_metadata import AttnMetadata
from .base import DecoderModel, float_vector
from .mtp_block import MTPModelMixin

SIGMOID_GATING = 2  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (deepseek2.expert_gating_func)


@dataclass
class MLAWeights:
    kv_a: WeightTensor  # [kv_lora + rope, D]
    kv_a_norm: np.ndarray
    kv_b: WeightTensor | None  # [H * (nope + v), kv_lora]; None in GGUFs that split it (attn_k_b, attn_v_b)
    wo: WeightTensor  # [D, H * v]
    q: WeightTensor | None = None  # [H * (nope + rope), D], without a q LoRA
    q_a: WeightTensor | None = None  # [q_lora, D]
    q_a_norm: np.ndarray | None = None
    q_b: WeightTensor | None = None  # [H * (nope + rope), q_lora]
    # absorbed MLA, per head as moe_linear's (experts, out, in) stacks: llama.cpp's attn_k_b (W_UK transposed) and
    # attn_v_b, or the same cut from kv_b
    k_b: WeightTensor | None = None  # (H, kv_lora, nope)
    v_b: WeightTensor | None = None  # (H, v, kv_lora)


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
    mtp_on_device = True
    # absorbed MLA: cache the normed latent and the rope key (kv_lora + rope floats a token, one shared "KV head")
    # and fold kv_b into the query (keys) and the output (values); False: K/V expanded per head as HF computes
    absorb_mla = True

    def __init__(self, model_file: GGUFFile, hparams: ModelHParams, ops: Any):
        meta, p = model_file.metadata, "deepseek2."
        if int(meta.get(p + "expert_gating_func", SIGMOID_GATING)) != SIGMOID_GATING:
            raise UnsupportedModelError(f"{model_file.path}: deepseek2 with softmax expert gating (DeepSeek-V2) is "
                                        f"not supported; DeepSeek-V3's sigmoid gating is")
        # llama.cpp's MLA GGUFs (attn_kv_b split into attn_k_b / attn_v_b) describe the cache under key_length /
        # value_length (kv_lora + rope / kv_lora, one KV head) and the per-head sizes under the *_mla keys
        self.qk_head_dim = int(meta.get(p + "attention.key_length_mla", hparams.head_dim))  # nope + rope
        self.value_dim = int(meta.get(p + "attention.value_length_mla", meta[p + "attention.value_length"]))
        self.split_kv_b = not model_file.has_tensor("blk.0.attn_kv_b.weight")
        self.absorbed = self.absorb_mla or self.split_kv_b  # split: only the absorbed form has its weights
        self.rope_dim = int(meta[p + "rope.dimension_count"])
        self.kv_lora_rank = int(meta[p + "attention.kv_lora_rank"])
        self.router = RouterConfig(
            top_k=int(meta[p + "expert_used_count"]), num_groups=int(meta.get(p + "expert_group_count", 1)),
            top_groups=int(meta.get(p + "expert_group_used_count", 1)),
            normalize=bool(meta.get(p + "expert_weights_norm", True)),
            scale=float(meta.get(p + "expert_weights_scale", 1.0)))
        super().__init__(model_file, hparams, ops)
        self.yarn = yarn_from_gguf(meta, "deepseek2")
        if self.yarn is not None:  # host-side tables: the backends' rope kernels run YaRN as frequency factors
            self.rope_freq_factors = self.yarn.freq_factors(self.rope_dim, hparams.rope_theta)
        self._split_mtp_layers(model_file, int(meta.get(p + "nextn_predict_layers", 0)))

    # --- loading -------------------------------------------------------------------------------------------
    def _load_layer(self, f: GGUFFile, i: int) -> DeepseekLayerWeights:
        def required(name: str) -> WeightTensor:
            return self._tensor(f, f"blk.{i}.{name}.weight")

        def optional(name: str) -> WeightTensor | None:
            return f.tensor(f"blk.{i}.{name}.weight") if f.has_tensor(f"blk.{i}.{name}.weight") else None

        has_q_lora = f.has_tensor(f"blk.{i}.attn_q_a.weight")
        mla = MLAWeights(kv_a=required("attn_kv_a_mqa"), kv_a_norm=float_vector(required("attn_kv_a_norm")),
                         kv_b=None if self.split_kv_b else required("attn_kv_b"), wo=required("attn_output"),
                         q=None if has_q_lora else required("attn_q"),
                         q_a=optional("attn_q_a"), q_b=optional("attn_q_b"),
                         q_a_norm=float_vector(required("attn_q_a_norm")) if has_q_lora else None)
        if self.split_kv_b:
            mla.k_b, mla.v_b = required("attn_k_b"), required("attn_v_b")
            self._check_split_shapes(f, mla.k_b, mla.v_b)
        elif self.absorbed:
            mla.k_b, mla.v_b = self._split_kv_b(mla.kv_b)
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

    def _check_split_shapes(self, f: GGUFFile, k_b: WeightTensor, v_b: WeightTensor) -> None:
        heads, nope = self.hparams.num_heads, self.qk_head_dim - self.rope_dim
        expected = {k_b.name: (heads, self.kv_lora_rank, nope), v_b.name: (heads, self.value_dim, self.kv_lora_rank)}
        for w in (k_b, v_b):
            if tuple(w.shape) != expected[w.name]:
                raise ModelFileError(f"{f.path}: {w.name} has shape {tuple(w.shape)}, expected {expected[w.name]} "
                                     f"(heads, rows, columns) from the MLA sizes")

    def _split_kv_b(self, kv_b: WeightTensor) -> tuple[WeightTensor, WeightTensor]:
        """kv_b [H * (nope + v), kv_lora] -> float32 k_b (H, kv_lora, nope) and v_b (H, v, kv_lora), as llama.cpp's
        converter splits it (the key rows transposed: the query is multiplied by W_UK^T)."""
        nope = self.qk_head_dim - self.rope_dim
        rows = self.ops.dequantize(kv_b)
        rows = self.ops.to_host(rows)
        per_head = rows.reshape(self.hparams.num_heads, nope + self.value_dim, self.kv_lora_rank)
        k_b = np.ascontiguousarray(per_head[:, :nope].transpose(0, 2, 1))
        v_b = np.ascontiguousarray(per_head[:, nope:])
        return (make_weight_tensor(kv_b.name + ":k_b", GGMLQuantizationType.F32, k_b.shape, k_b),
                make_weight_tensor(kv_b.name + ":v_b", GGMLQuantizationType.F32, v_b.shape, v_b))

    def kv_cache_layout(self) -> tuple[int, int, int]:
        """Absorbed: one shared entry [latent | k_pe] a token, the values read from its latent columns."""
        if self.absorbed:
            return 1, self.kv_lora_rank + self.rope_dim, 0
        return super().kv_cache_layout()

    # --- forward -------------------------------------------------------------------------------------------
    def _attention(self, layer_id: int, w: DeepseekLayerWeights, h: np.ndarray, positions: np.ndarray,
                   attn: AttnMetadata, k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, hp, mla = self.ops, self.hparams, w.mla
        num_tokens, heads, qk_dim, eps = h.shape[0], hp.num_heads, self.qk_head_dim, hp.rms_norm_eps
        if mla.q is not None:
            q = ops.linear(h, mla.q)
        else:
            q = ops.linear(ops.rms_norm(ops.linear(h, mla.q_a), mla.q_a_norm, eps), mla.q_b)
        kv_a = ops.linear(h, mla.kv_a)  # [T, kv_lora + rope]
        latent, k_pe = self.ops.split_columns(kv_a, (self.kv_lora_rank, self.rope_dim))
        latent = ops.rms_norm(self.ops.contiguous(latent), mla.kv_a_norm, eps)
        k_pe = self._rope(self.ops.contiguous(k_pe).reshape(num_tokens, 1, self.rope_dim), positions)  # [T, 1, rope]
        if mla.k_b is not None:
            o = self._absorbed_attention(mla, q, latent, k_pe, positions, attn, k_cache)
        else:
            o = self._expanded_attention(mla, q.reshape(num_tokens, heads, qk_dim), latent, k_pe, positions, attn,
                                         k_cache, v_cache)
        return ops.linear(o.reshape(num_tokens, heads * self.value_dim), mla.wo)

    def _absorbed_attention(self, mla: MLAWeights, q: np.ndarray, latent: np.ndarray, k_pe: np.ndarray,
                            positions: np.ndarray, attn: AttnMetadata, cache: np.ndarray) -> np.ndarray:
        """q_nope . (W_UK c) = (W_UK^T q_nope) . c, so the heads attend over the shared latent c directly (MQA over
        [c | k_pe]); softmax(..) @ c then goes up through W_UV once per query instead of once per cached token.
        q: [T, H * (nope + rope)] -> [T * H, v]; the per-head products are moe_linear with the head as the expert."""
        ops, heads, rope, lora = self.ops, self.hparams.num_heads, self.rope_dim, self.kv_lora_rank
        num_tokens = q.shape[0]
        head_ids = np.tile(np.arange(heads, dtype=np.int64), num_tokens)  # row t * H + h is head h
        q_nope, q_pe = self.ops.split_columns(q.reshape(num_tokens * heads, self.qk_head_dim),
                                           (self.qk_head_dim - rope, rope))
        q_latent = ops.moe_linear(self.ops.contiguous(q_nope), mla.k_b, head_ids)  # [T * H, kv_lora]
        q_pe = self._rope(self.ops.contiguous(q_pe).reshape(num_tokens, heads, rope), positions)
        query = self.ops.concat_columns([q_latent, q_pe.reshape(num_tokens * heads, rope)])
        entry = self.ops.concat_columns([latent, k_pe.reshape(num_tokens, rope)]).reshape(num_tokens, 1, lora + rope)
        ops.store_kv(entry, entry, cache, cache, attn.slot_mapping)
        o = ops.paged_attention(query.reshape(num_tokens, heads, lora + rope), cache, cache, attn.block_tables,
                                attn.context_lens, attn.query_start_loc, self.attention_scale())  # V: the entries
        o_latent, _ = self.ops.split_columns(o.reshape(num_tokens * heads, lora + rope), (lora, rope))
        return ops.moe_linear(self.ops.contiguous(o_latent), mla.v_b, head_ids)  # [T * H, v]

    def _expanded_attention(self, mla: MLAWeights, q: np.ndarray, latent: np.ndarray, k_pe: np.ndarray,
                            positions: np.ndarray, attn: AttnMetadata, k_cache: np.ndarray,
                            v_cache: np.ndarray) -> np.ndarray:
        """HF's form: kv_b expands every token's latent into per-head K = [k_nope | k_pe] and V."""
        ops = self.ops
        num_tokens, heads, qk_dim = q.shape
        nope = qk_dim - self.rope_dim
        kv = ops.linear(latent, mla.kv_b).reshape(num_tokens, heads, nope + self.value_dim)
        k = np.empty_like(q)
        k[..., :nope] = kv[..., :nope]
        k[..., nope:] = k_pe  # one rope key shared by the heads
        q[..., nope:] = self._rope(np.ascontiguousarray(q[..., nope:]), positions)
        v = np.zeros_like(q)  # V padded to K's width: the paged cache holds one head size
        v[..., :self.value_dim] = kv[..., nope:]
        ops.store_kv(k, v, k_cache, v_cache, attn.slot_mapping)
        o = ops.paged_attention(q, k_cache, v_cache, attn.block_tables, attn.context_lens, attn.query_start_loc,
                                self.attention_scale())
        return np.ascontiguousarray(o[..., :self.value_dim])

    def attention_scale(self) -> float:
        """1/sqrt(nope + rope dims), times YaRN's mscale(factor, mscale_all_dim)^2 (HF yarn_apply_mscale)."""
        scale = 1.0 / float(np.sqrt(self.qk_head_dim))
        return scale * self.yarn.softmax_scale_multiplier if self.yarn is not None else scale

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Interleaved pairs (x[2i], x[2i+1]) of the rope dims, x: [T, heads, rope_dim]; YaRN scales cos/sin."""
        out = self.ops.rope(x, positions, self.hparams.rope_theta, False, 1.0, self.rope_freq_factors)
        if self.yarn is not None and self.yarn.attention_factor != 1.0:
            out = self.ops.scale(out, self.yarn.attention_factor)
        return out

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
