"""Qwen3-Next and Qwen3.5 (dense or MoE): Gated DeltaNet layers interleaved with gated full attention.

* Gated DeltaNet (layers with ssm_out): qkv -> short causal conv + SiLU -> l2-normalised q, k; per value head a
  delta-rule state S [d_k, d_v] decayed by exp(g), g = ssm_a * softplus(alpha + dt_bias), written with strength
  beta = sigmoid(b); output RMSNorm(o) * w * SiLU(z) -> ssm_out. Prefill uses the chunked form, decode the
  recurrent one. The conv and delta-rule states live per sequence in a RecurrentStatePool slot (AttnMetadata).
* Gated attention: attn_q holds [q | gate] per head; q/k RMSNorm, RoPE on the first rope_dim dims only, output
  times sigmoid(gate).
* Norms: GGUF stores w + 1 (HF's 1 + w convention baked in), so every norm is a plain RMSNorm here.
* The last nextn_predict_layers blocks are MTP layers (llama.cpp layout): loaded into `mtp_layers` for the
  speculative decoder, not run by forward().
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf_loader import GGUFFile, ModelFileError, UnsupportedModelError, WeightTensor
from gguf_loader.hparams import ModelHParams

from .attn_metadata import AttnMetadata
from .base import DecoderModel, float_vector
from .qwen3_moe import ExpertWeights, apply_experts, load_experts


@dataclass
class GatedAttentionWeights:
    wq: WeightTensor  # [H * 2 * hd, D]: per head its query then its gate
    wk: WeightTensor
    wv: WeightTensor
    wo: WeightTensor
    q_norm: np.ndarray
    k_norm: np.ndarray


@dataclass
class DeltaNetWeights:
    conv: np.ndarray  # float32 [C, K], C = 2 * H_k * d_k + H_v * d_v
    a: np.ndarray  # float32 [H_v]: -exp(A_log)
    dt_bias: np.ndarray  # float32 [H_v]
    norm: np.ndarray  # float32 [d_v]
    out: WeightTensor  # [D, H_v * d_v]
    qkv: WeightTensor | None = None  # [C, D]: flat [q_all | k_all | v_all]
    z: WeightTensor | None = None  # [H_v * d_v, D]
    beta: WeightTensor | None = None  # [H_v, D]
    alpha: WeightTensor | None = None  # [H_v, D]
    qkvz: WeightTensor | None = None  # qwen3next: [q, k, v (r heads), z (r heads)] grouped per key head
    ba: WeightTensor | None = None  # qwen3next: [b (r), a (r)] grouped per key head


@dataclass
class VerifyRecord:
    """One verification forward of one sequence in one Gated DeltaNet layer."""
    first_position: int  # position of the first verified token
    conv_before: np.ndarray  # conv state [K-1, C] before the forward
    ssm_before: np.ndarray  # delta-rule state [H_v, d_k, d_v] before the forward
    conv_inputs: np.ndarray  # [n, C] conv inputs of the n verified tokens
    q: np.ndarray  # [n, H_v, d_k] and the rest: the recurrence inputs of those tokens
    k: np.ndarray
    v: np.ndarray
    g: np.ndarray
    beta: np.ndarray


@dataclass
class HybridLayerWeights:
    attn_norm: np.ndarray
    ffn_norm: np.ndarray  # llama.cpp's post_attention_norm: the FFN's input norm
    mixer: GatedAttentionWeights | DeltaNetWeights
    w_gate: WeightTensor | None = None  # dense FFN
    w_up: WeightTensor | None = None
    w_down: WeightTensor | None = None
    experts: ExpertWeights | None = None  # MoE FFN (Qwen3-Next, Qwen3.5-MoE)


@dataclass
class MTPWeights:
    """One multi-token-prediction block: logits(t+2) = head(shared_head_norm(block(eh_proj([enorm(emb(t+1)),
    hnorm(h_t)])))); embedding and head are the target's (specdecode_notes 1.3)."""
    eh_proj: WeightTensor  # [D, 2D]
    enorm: np.ndarray
    hnorm: np.ndarray
    shared_head_norm: np.ndarray
    layer: HybridLayerWeights  # a full-attention block
    layer_id: int  # its KV cache index


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x.astype(np.float64)).astype(np.float32)


class Qwen3NextModel(DecoderModel):
    def __init__(self, model_file: GGUFFile, hparams: ModelHParams, ops: Any):
        if getattr(ops, "ON_DEVICE", False):
            raise UnsupportedModelError(f"{hparams.arch}: the hybrid model's glue between ops is numpy, so it runs "
                                        f"on the cpu and reference backends only (use --backend cpu)")
        super().__init__(model_file, hparams, ops)
        num_main = self.num_main_layers
        self.mtp_layers = [self._load_mtp(model_file, i, layer) for i, layer in enumerate(self.layers)
                           if i >= num_main]
        self.layers = self.layers[:num_main]

    @property
    def num_main_layers(self) -> int:
        return self.hparams.num_layers - int(self.hparams.extra.get("nextn_predict_layers", 0))

    # --- loading -------------------------------------------------------------------------------------------
    def _load_layer(self, f: GGUFFile, i: int) -> HybridLayerWeights:
        def required(name: str) -> WeightTensor:
            return self._tensor(f, f"blk.{i}.{name}.weight")

        is_recurrent = f.has_tensor(f"blk.{i}.ssm_out.weight")
        mixer = self._load_delta_net(f, i) if is_recurrent else GatedAttentionWeights(
            wq=required("attn_q"), wk=required("attn_k"), wv=required("attn_v"), wo=required("attn_output"),
            q_norm=float_vector(required("attn_q_norm")), k_norm=float_vector(required("attn_k_norm")))
        experts = load_experts(self, f, i)
        return HybridLayerWeights(
            attn_norm=float_vector(required("attn_norm")), ffn_norm=float_vector(required("post_attention_norm")),
            mixer=mixer, experts=experts,
            w_gate=None if experts else required("ffn_gate"), w_up=None if experts else required("ffn_up"),
            w_down=None if experts else required("ffn_down"))

    def _load_delta_net(self, f: GGUFFile, i: int) -> DeltaNetWeights:
        def optional(name: str) -> WeightTensor | None:
            return f.tensor(f"blk.{i}.{name}") if f.has_tensor(f"blk.{i}.{name}") else None

        extra = self.hparams.extra
        channels = 2 * extra["ssm_key_heads"] * extra["ssm_key_dim"] + extra["ssm_value_heads"] * extra["ssm_value_dim"]
        conv = self.ops.dequantize(self._tensor(f, f"blk.{i}.ssm_conv1d.weight")).reshape(channels, -1)
        w = DeltaNetWeights(
            conv=np.ascontiguousarray(conv, dtype=np.float32), a=float_vector(self._tensor(f, f"blk.{i}.ssm_a")),
            dt_bias=float_vector(self._tensor(f, f"blk.{i}.ssm_dt.bias")),
            norm=float_vector(self._tensor(f, f"blk.{i}.ssm_norm.weight")),
            out=self._tensor(f, f"blk.{i}.ssm_out.weight"),
            qkv=optional("attn_qkv.weight"), z=optional("attn_gate.weight"), beta=optional("ssm_beta.weight"),
            alpha=optional("ssm_alpha.weight"), qkvz=optional("ssm_in.weight"), ba=optional("ssm_ba.weight"))
        has_flat = w.qkv is not None and w.z is not None
        if not (has_flat or w.qkvz is not None) or not (w.beta is not None and w.alpha is not None or w.ba is not None):
            raise ModelFileError(f"{f.path}: layer {i} lacks the Gated DeltaNet input projections")
        return w

    def _load_mtp(self, f: GGUFFile, i: int, layer: HybridLayerWeights) -> MTPWeights:
        def vector(name: str) -> np.ndarray:
            return float_vector(self._tensor(f, f"blk.{i}.nextn.{name}.weight"))

        norm = (vector("shared_head_norm") if f.has_tensor(f"blk.{i}.nextn.shared_head_norm.weight")
                else self.output_norm)
        return MTPWeights(eh_proj=self._tensor(f, f"blk.{i}.nextn.eh_proj.weight"), enorm=vector("enorm"),
                          hnorm=vector("hnorm"), shared_head_norm=norm, layer=layer, layer_id=i)

    def mtp_forward(self, mtp: MTPWeights, token_ids: np.ndarray, hidden: np.ndarray, positions: np.ndarray,
                    attn: AttnMetadata, k_cache: np.ndarray, v_cache: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One MTP step per row: token t_{p+1} and hidden H_p (post final norm) at position p -> (logits of
        t_{p+2} [n, vocab], the MTP's post-norm hidden [n, D], fed to the next draft step)."""
        ops, eps = self.ops, self.hparams.rms_norm_eps
        e = ops.rms_norm(ops.embedding(token_ids, self.token_embedding), mtp.enorm, eps)
        h = ops.rms_norm(np.ascontiguousarray(hidden, dtype=np.float32), mtp.hnorm, eps)
        x = ops.linear(np.concatenate([e, h], axis=1), mtp.eh_proj)  # [enorm(e), hnorm(h)]: embedding first
        x = self._layer_forward(mtp.layer_id, mtp.layer, x, positions, attn, k_cache, v_cache)
        out = ops.rms_norm(x, mtp.shared_head_norm, eps)
        return ops.linear(out, self.lm_head), out

    def recurrent_state_shapes(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """layer id -> (conv state shape [K-1, C], delta-rule state shape [H_v, d_k, d_v]) per sequence."""
        extra = self.hparams.extra
        shapes = {}
        for layer_id, layer in enumerate(self.layers):
            if isinstance(layer.mixer, DeltaNetWeights):
                conv = layer.mixer.conv
                shapes[layer_id] = ((conv.shape[1] - 1, conv.shape[0]),
                                    (extra["ssm_value_heads"], extra["ssm_key_dim"], extra["ssm_value_dim"]))
        return shapes

    # --- forward -------------------------------------------------------------------------------------------
    def _layer_forward(self, layer_id: int, w: HybridLayerWeights, x: np.ndarray, positions: np.ndarray,
                       attn: AttnMetadata, k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, eps = self.ops, self.hparams.rms_norm_eps
        h = ops.rms_norm(x, w.attn_norm, eps)
        if isinstance(w.mixer, DeltaNetWeights):
            o = self._delta_net(layer_id, w.mixer, h, attn, positions)
        else:
            o = self._gated_attention(w.mixer, h, positions, attn, k_cache, v_cache)
        x = x + o
        h = ops.rms_norm(x, w.ffn_norm, eps)
        if w.experts is not None:
            return x + apply_experts(ops, w.experts, h)
        return x + ops.linear(ops.silu_mul(ops.linear(h, w.w_gate), ops.linear(h, w.w_up)), w.w_down)

    def _partial_rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """RoPE (NeoX pairs) on the first rope_dim dims of each head of x: [T, heads, hd]; the rest pass."""
        rot = int(self.hparams.extra["rope_dim"])
        x[..., :rot] = self.ops.rope(np.ascontiguousarray(x[..., :rot]), positions, self.hparams.rope_theta, True)
        return x

    def _gated_attention(self, w: GatedAttentionWeights, h: np.ndarray, positions: np.ndarray, attn: AttnMetadata,
                         k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, hp = self.ops, self.hparams
        num_tokens, hd, eps = h.shape[0], hp.head_dim, hp.rms_norm_eps
        q_gate = ops.linear(h, w.wq).reshape(num_tokens, hp.num_heads, 2 * hd)
        gate = q_gate[:, :, hd:].reshape(num_tokens, -1)
        q = ops.rms_norm(np.ascontiguousarray(q_gate[:, :, :hd]).reshape(-1, hd), w.q_norm, eps)
        k = ops.rms_norm(ops.linear(h, w.wk).reshape(-1, hd), w.k_norm, eps)
        q = self._partial_rope(q.reshape(num_tokens, hp.num_heads, hd), positions)  # q: [T, H, hd]
        k = self._partial_rope(k.reshape(num_tokens, hp.num_kv_heads, hd), positions)  # k: [T, KVH, hd]
        v = ops.linear(h, w.wv).reshape(num_tokens, hp.num_kv_heads, hd)
        ops.store_kv(k, v, k_cache, v_cache, attn.slot_mapping)
        o = ops.paged_attention(q, k_cache, v_cache, attn.block_tables, attn.context_lens, attn.query_start_loc,
                                1.0 / float(np.sqrt(hd)))
        return ops.linear(o.reshape(num_tokens, -1) * _sigmoid(gate), w.wo)

    def _delta_net_inputs(self, w: DeltaNetWeights, h: np.ndarray):
        """(mixed qkv [T, C] flat, z [T, H_v * d_v], b [T, H_v], a [T, H_v]) from either projection layout."""
        ops, extra = self.ops, self.hparams.extra
        if w.qkvz is None:
            mixed, z = ops.linear(h, w.qkv), ops.linear(h, w.z)
        else:  # grouped per key head: [q | k | v (r heads) | z (r heads)]
            num_tokens, key_heads, key_dim = h.shape[0], extra["ssm_key_heads"], extra["ssm_key_dim"]
            value_width = extra["ssm_value_heads"] * extra["ssm_value_dim"] // key_heads
            y = ops.linear(h, w.qkvz).reshape(num_tokens, key_heads, -1)
            q, k = y[:, :, :key_dim], y[:, :, key_dim:2 * key_dim]
            v, z = y[:, :, 2 * key_dim:2 * key_dim + value_width], y[:, :, 2 * key_dim + value_width:]
            mixed = np.concatenate([t.reshape(num_tokens, -1) for t in (q, k, v)], axis=1)
            z = np.ascontiguousarray(z).reshape(num_tokens, -1)
        if w.ba is None:
            return mixed, z, ops.linear(h, w.beta), ops.linear(h, w.alpha)
        ba = ops.linear(h, w.ba).reshape(h.shape[0], extra["ssm_key_heads"], -1)
        ratio = ba.shape[2] // 2
        return mixed, z, ba[:, :, :ratio].reshape(h.shape[0], -1), ba[:, :, ratio:].reshape(h.shape[0], -1)

    def _delta_net(self, layer_id: int, w: DeltaNetWeights, h: np.ndarray, attn: AttnMetadata,
                   positions: np.ndarray) -> np.ndarray:
        ops, extra = self.ops, self.hparams.extra
        if attn.recurrent_state is None:
            raise RuntimeError("a Gated DeltaNet layer needs AttnMetadata.recurrent_state (a RecurrentStatePool)")
        mixed, z, b, a = self._delta_net_inputs(w, h)
        beta, g = _sigmoid(b), w.a * _softplus(a + w.dt_bias)  # [T, H_v] each
        out = np.empty((h.shape[0], extra["ssm_value_heads"], extra["ssm_value_dim"]), dtype=np.float32)
        for seq in range(attn.num_seqs):
            rows = slice(int(attn.query_start_loc[seq]), int(attn.query_start_loc[seq + 1]))
            if rows.stop > rows.start:
                records = attn.records_states is not None and bool(attn.records_states[seq])
                out[rows] = self._delta_net_sequence(layer_id, w, mixed[rows], g[rows], beta[rows], attn,
                                                     int(attn.state_slots[seq]), int(positions[rows.start]), records)
        dv = extra["ssm_value_dim"]
        o = ops.rms_norm(out.reshape(-1, dv), w.norm, self.hparams.rms_norm_eps).reshape(h.shape[0], -1)
        return ops.linear(o * ops.silu(z), w.out)

    def _delta_net_sequence(self, layer_id: int, w: DeltaNetWeights, mixed: np.ndarray, g: np.ndarray,
                            beta: np.ndarray, attn: AttnMetadata, slot: int, first_position: int,
                            records: bool) -> np.ndarray:
        """The new tokens of one sequence from its state slot: conv, then the chunked (prefill) or recurrent
        (one token) delta rule; `records` (speculative verification) keeps what `rollback` needs."""
        ops, pool = self.ops, attn.recurrent_state
        conv_state, ssm_state = pool.layer_states(layer_id, slot)
        before = (conv_state.copy(), ssm_state.copy()) if records else None
        q, k, v = self._split_heads(ops.conv1d_silu(mixed, w.conv, conv_state))
        rule = ops.gated_delta_rule_chunked if len(mixed) > 1 else ops.gated_delta_rule_recurrent
        out = rule(q, k, v, g, beta, ssm_state)
        record = None if before is None else VerifyRecord(first_position, *before, np.array(mixed), q, k, v,
                                                          g.copy(), beta.copy())
        pool.record(layer_id, slot, record)
        return out

    def _split_heads(self, mixed: np.ndarray):
        """Conv output [n, C] -> q, k (l2-normalised, q scaled, repeated to the value heads) [n, H_v, d_k], v."""
        ops, extra = self.ops, self.hparams.extra
        n, key_heads, key_dim = mixed.shape[0], extra["ssm_key_heads"], extra["ssm_key_dim"]
        value_heads, key_width = extra["ssm_value_heads"], extra["ssm_key_heads"] * extra["ssm_key_dim"]
        q = ops.l2_normalize(mixed[:, :key_width].reshape(n, key_heads, key_dim)) * np.float32(key_dim ** -0.5)
        k = ops.l2_normalize(mixed[:, key_width:2 * key_width].reshape(n, key_heads, key_dim))
        v = mixed[:, 2 * key_width:].reshape(n, value_heads, extra["ssm_value_dim"])
        ratio = value_heads // key_heads
        if extra["ssm_value_heads_grouped"]:  # value head j reads key head j // ratio
            q, k = np.repeat(q, ratio, axis=1), np.repeat(k, ratio, axis=1)
        else:  # llama.cpp qwen35 GGUF: value head j reads key head j % H_k
            q, k = np.tile(q, (1, ratio, 1)), np.tile(k, (1, ratio, 1))
        return q, k, np.ascontiguousarray(v)


class Qwen35Model(Qwen3NextModel):
    """Qwen3.5 / Qwen3.6 text models: separate beta/alpha projections, value heads tiled in llama.cpp GGUFs."""
