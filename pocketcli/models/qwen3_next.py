"""Qwen3-Next and Qwen3.5 (dense or MoE): Gated DeltaNet layers interleaved with gated full attention.

* Gated DeltaNet (layers with ssm_out): qkv -> short causal conv + SiLU -> l2-normalised q, k; per value head a
  delta-rule state S [d_k, d_v] decayed by exp(g), g = ssm_a * softplus(alpha + dt_bias), written with strength
  beta = sigmoid(b); output RMSNorm(o) * w * SiLU(z) -> ssm_out. Prefill uses the chunked form, decode the
  recurrent one. The conv and delta-rule states live per sequence in a RecurrentStatePool slot (AttnMetadata).
* Gated attention: attn_q holds [q | gate] per head; q/k RMSNorm, RoPE on the first rope_dim dims only, output
  times sigmoid(gate).
* Norms: GGUF stores w + 1 (HF's 1 + w convention baked in), so every norm is a plain RMSNorm here.
* Backends: the layers' own ops (gates, head expansion, gated norm, sigmoid gate, partial RoPE) come from the
  backend like every other op; on a device backend (cuda) the reshapes, splits and concatenations between them
  run on the device too (the `_columns_of_groups` / `_concat_*` helpers), so activations and the recurrent
  state never leave it.
* The last nextn_predict_layers blocks are MTP layers (llama.cpp layout): loaded into `mtp_layers` for the
  speculative decoder, not run by forward().
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf_loader import GGUFFile, ModelFileError, WeightTensor
from gguf_loader.hparams import ModelHParams

from .attn_metadata import AttnMetadata
from .base import DecoderModel, float_vector
from .mtp_block import MTPModelMixin
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
    """One verification forward of one sequence in one Gated DeltaNet layer (device arrays on a device backend)."""
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


class Qwen3NextModel(MTPModelMixin, DecoderModel):  # MTP blocks (mtp_layers, mtp_forward): models/mtp_block.py
    mtp_on_device = True

    def __init__(self, model_file: GGUFFile, hparams: ModelHParams, ops: Any):
        super().__init__(model_file, hparams, ops)
        self._split_mtp_layers(model_file, int(hparams.extra.get("nextn_predict_layers", 0)))

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
            o = self._delta_net(layer_id, w.mixer, h, attn)
        else:
            o = self._gated_attention(w.mixer, h, positions, attn, k_cache, v_cache)
        x = self.ops.add(x, o)
        h = ops.rms_norm(x, w.ffn_norm, eps)
        if w.experts is not None:
            return self.ops.add(x, apply_experts(ops, w.experts, h))
        return self.ops.add(x, ops.linear(ops.silu_mul(ops.linear(h, w.w_gate), ops.linear(h, w.w_up)), w.w_down))

    def _partial_rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """RoPE (NeoX pairs) on the first rope_dim dims of each head of x: [T, heads, hd]; the rest pass."""
        return self.ops.rope_partial(x, positions, self.hparams.rope_theta, int(self.hparams.extra["rope_dim"]))

    def _gated_attention(self, w: GatedAttentionWeights, h: np.ndarray, positions: np.ndarray, attn: AttnMetadata,
                         k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, hp = self.ops, self.hparams
        num_tokens, hd, eps = h.shape[0], hp.head_dim, hp.rms_norm_eps
        q, gate = self._columns_of_groups(ops.linear(h, w.wq), hp.num_heads, (hd, hd))  # [T, H * hd] each
        q = ops.rms_norm(q.reshape(-1, hd), w.q_norm, eps)
        k = ops.rms_norm(ops.linear(h, w.wk).reshape(-1, hd), w.k_norm, eps)
        q = self._partial_rope(q.reshape(num_tokens, hp.num_heads, hd), positions)  # q: [T, H, hd]
        k = self._partial_rope(k.reshape(num_tokens, hp.num_kv_heads, hd), positions)  # k: [T, KVH, hd]
        v = ops.linear(h, w.wv).reshape(num_tokens, hp.num_kv_heads, hd)
        ops.store_kv(k, v, k_cache, v_cache, attn.slot_mapping)
        o = ops.paged_attention(q, k_cache, v_cache, attn.block_tables, attn.context_lens, attn.query_start_loc,
                                1.0 / float(np.sqrt(hd)))
        return ops.linear(ops.sigmoid_mul(o.reshape(num_tokens, -1), gate), w.wo)

    def _delta_net_inputs(self, w: DeltaNetWeights, h: np.ndarray):
        """(mixed qkv [T, C] flat, z [T, H_v * d_v], b [T, H_v], a [T, H_v]) from either projection layout."""
        ops, extra = self.ops, self.hparams.extra
        key_heads = extra["ssm_key_heads"]
        if w.qkvz is None:
            mixed, z = ops.linear(h, w.qkv), ops.linear(h, w.z)
        else:  # grouped per key head: [q | k | v (r heads) | z (r heads)]
            key_dim = extra["ssm_key_dim"]
            value_width = extra["ssm_value_heads"] * extra["ssm_value_dim"] // key_heads
            q, k, v, z = self._columns_of_groups(ops.linear(h, w.qkvz), key_heads,
                                                 (key_dim, key_dim, value_width, value_width))
            mixed = self.ops.concat_columns([q, k, v])
        if w.ba is None:
            return mixed, z, ops.linear(h, w.beta), ops.linear(h, w.alpha)
        ratio = extra["ssm_value_heads"] // key_heads
        b, a = self._columns_of_groups(ops.linear(h, w.ba), key_heads, (ratio, ratio))
        return mixed, z, b, a

    def _delta_net(self, layer_id: int, w: DeltaNetWeights, h: np.ndarray, attn: AttnMetadata) -> np.ndarray:
        ops = self.ops
        if attn.recurrent_state is None:
            raise RuntimeError("a Gated DeltaNet layer needs AttnMetadata.recurrent_state (a RecurrentStatePool)")
        mixed, z, b, a = self._delta_net_inputs(w, h)
        g, beta = ops.deltanet_gates(b, a, w.a, w.dt_bias)  # [T, H_v] each
        # host ints (set by _backend_inputs) decide the loop: no device read per layer
        starts, positions = attn.host_query_start_loc, attn.host_positions
        outputs = []  # [n_seq, H_v, d_v] per sequence with new tokens, in batch order
        for seq in range(attn.num_seqs):
            rows = slice(int(starts[seq]), int(starts[seq + 1]))
            if rows.stop > rows.start:
                records = attn.records_states is not None and bool(attn.records_states[seq])
                outputs.append(self._delta_net_sequence(layer_id, w, mixed[rows], g[rows], beta[rows], attn,
                                                        int(attn.state_slots[seq]), int(positions[rows.start]),
                                                        records))
        out = outputs[0] if len(outputs) == 1 else self.ops.concat_rows(outputs)
        return ops.linear(ops.gated_rms_norm(out, w.norm, z, self.hparams.rms_norm_eps), w.out)

    def _delta_net_sequence(self, layer_id: int, w: DeltaNetWeights, mixed: np.ndarray, g: np.ndarray,
                            beta: np.ndarray, attn: AttnMetadata, slot: int, first_position: int,
                            records: bool) -> np.ndarray:
        """The new tokens of one sequence from its state slot: conv, then the chunked (prefill) or recurrent
        (one token) delta rule; `records` (speculative verification) keeps what `rollback` needs."""
        ops, pool = self.ops, attn.recurrent_state
        conv_state, ssm_state = pool.layer_states(layer_id, slot)
        copy = pool.arrays.copy_array
        before = (copy(conv_state), copy(ssm_state)) if records else None
        q, k, v = self._split_heads(ops.conv1d_silu(mixed, w.conv, conv_state))
        rule = ops.gated_delta_rule_chunked if mixed.shape[0] > 1 else ops.gated_delta_rule_recurrent
        out = rule(q, k, v, g, beta, ssm_state)
        record = None if before is None else VerifyRecord(first_position, *before, copy(mixed), q, k, v,
                                                          copy(g), copy(beta))
        pool.record(layer_id, slot, record)
        return out

    def _split_heads(self, mixed: np.ndarray):
        """Conv output [n, C] -> q, k (l2-normalised, q scaled, repeated to the value heads) [n, H_v, d_k], v."""
        ops, extra = self.ops, self.hparams.extra
        n, key_heads, key_dim = mixed.shape[0], extra["ssm_key_heads"], extra["ssm_key_dim"]
        value_heads, key_width = extra["ssm_value_heads"], extra["ssm_key_heads"] * extra["ssm_key_dim"]
        q, k, v = self.ops.split_columns(mixed, (key_width, key_width, value_heads * extra["ssm_value_dim"]))
        # grouped (HF, qwen3next GGUF): value head j reads key head j // ratio; tiled (llama.cpp qwen35): j % H_k
        grouped = extra["ssm_value_heads_grouped"]
        q = ops.expand_heads(ops.l2_normalize(q.reshape(n, key_heads, key_dim)), value_heads, grouped,
                             key_dim ** -0.5)
        k = ops.expand_heads(ops.l2_normalize(k.reshape(n, key_heads, key_dim)), value_heads, grouped)
        return q, k, self.ops.contiguous(v).reshape(n, value_heads, extra["ssm_value_dim"])

    def _backend_inputs(self, positions, attn: AttnMetadata):
        """The base's device uploads, plus host copies of the positions and query starts, which the Gated
        DeltaNet loop over sequences reads (attributes beside AttnMetadata's fields)."""
        host_positions, host_starts = np.asarray(positions), np.asarray(attn.query_start_loc)
        positions, attn = super()._backend_inputs(positions, attn)
        attn.host_positions, attn.host_query_start_loc = host_positions, host_starts
        return positions, attn

    # --- layout between ops ----------------------------------------------------------------------------------
    def _columns_of_groups(self, y, num_groups: int, widths: tuple[int, ...]) -> list:
        """y: [T, num_groups * sum(widths)], each group's columns a run of parts of these widths -> each part's
        columns of every group, [T, num_groups * width] (per head [q | gate]; per key head [q | k | v | z])."""
        num_tokens = y.shape[0]
        parts = self.ops.split_columns(y.reshape(num_tokens * num_groups, sum(widths)), widths)
        return [self.ops.contiguous(p).reshape(num_tokens, num_groups * width) for p, width in zip(parts, widths)]


class Qwen35Model(Qwen3NextModel):
    """Qwen3.5 / Qwen3.6 text models: separate beta/alpha projections, value heads tiled in llama.cpp GGUFs."""
