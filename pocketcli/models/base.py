"""A decoder-only transformer shared by every architecture; each architecture file sets what differs.

Weights come in still quantized from the loader; the backend's ops come from `kernels_numba.get_ops`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf_loader import GGUFFile, ModelFileError, WeightTensor
from gguf_loader.hparams import ModelHParams
from gguf_loader.private_bytes import private_bytes

from .attn_metadata import AttnMetadata
from .decode_split import DecodeSplit, split_decodes


@dataclass(frozen=True)
class StackedWeight:
    parts: tuple[WeightTensor, ...]  # projections of the same input, of one quant type and row length

    @property
    def num_rows(self) -> tuple[int, ...]:  # rows of each projection, in order
        return tuple(t.num_rows for t in self.parts)


@dataclass
class LayerWeights:
    attn_norm: np.ndarray
    wq: WeightTensor
    wk: WeightTensor
    wv: WeightTensor
    wo: WeightTensor
    ffn_norm: np.ndarray
    w_gate: WeightTensor
    w_up: WeightTensor
    w_down: WeightTensor
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffw_norm: np.ndarray | None = None
    qkv_groups: tuple[StackedWeight, ...] = ()  # wq, wk, wv as runs of one type, each run's rows stacked
    gate_up_groups: tuple[StackedWeight, ...] = ()  # w_gate, w_up likewise

    def __post_init__(self):
        # runs the backend may multiply as one stacked weight (ops.stack_weights): fewer kernel launches on a device
        self.qkv_groups = stack_same_type_runs((self.wq, self.wk, self.wv))
        self.gate_up_groups = stack_same_type_runs((self.w_gate, self.w_up))


def float_vector(tensor: WeightTensor) -> np.ndarray:
    """A small float tensor (norm weight, bias) as a float32 vector, copied with file reads (private_bytes): reading
    it through the mapping would make megabytes of the neighbouring weights resident."""
    if tensor.type_name == "F32":
        return private_bytes(np.asarray(tensor.data)).view(np.float32).reshape(-1)
    if tensor.type_name == "F16":
        return private_bytes(np.asarray(tensor.data)).view(np.float16).reshape(-1).astype(np.float32)
    raise ModelFileError(f"tensor {tensor.name} has type {tensor.type_name}; expected F32 or F16")


def stack_same_type_runs(tensors: tuple[WeightTensor, ...]) -> tuple[StackedWeight, ...]:
    """Runs of consecutive tensors of one quant type (and row length), each to be used as one stacked tensor."""
    runs: list[list[WeightTensor]] = []
    for t in tensors:
        if runs and _stackable(runs[-1][-1], t):
            runs[-1].append(t)
        else:
            runs.append([t])
    return tuple(StackedWeight(tuple(run)) for run in runs)


def _stackable(a: WeightTensor, b: WeightTensor) -> bool:
    return a.fp8 is None and b.fp8 is None and a.ggml_type == b.ggml_type and a.row_length == b.row_length


class DecoderModel:
    activation = "silu"  # "silu" or "gelu" (tanh approximation), applied to the gate projection
    # hidden-state taps for drafters (DFlash, MTP): forward keeps each listed layer's output in tapped_hidden
    tap_layer_ids: frozenset[int] = frozenset()
    keep_taps_on_device = False  # a drafter computing on the device backend (MTP) reads the taps there

    def __init__(self, model_file: GGUFFile, hparams: ModelHParams, ops: Any):
        self.hparams = hparams
        self.ops = ops
        self.token_embedding = self._tensor(model_file, "token_embd.weight")
        self.output_norm = float_vector(self._tensor(model_file, "output_norm.weight"))
        self.lm_head = (self._tensor(model_file, "output.weight") if model_file.has_tensor("output.weight")
                        else self.token_embedding)
        self.rope_freq_factors = (float_vector(model_file.tensor("rope_freqs.weight"))
                                  if model_file.has_tensor("rope_freqs.weight") else None)
        self.layers = [self._load_layer(model_file, i) for i in range(hparams.num_layers)]

    # --- loading -------------------------------------------------------------------------------------------
    @staticmethod
    def _tensor(model_file: GGUFFile, name: str) -> WeightTensor:
        if not model_file.has_tensor(name):
            raise ModelFileError(f"{model_file.path}: missing tensor {name}")
        return model_file.tensor(name)

    def _load_layer(self, f: GGUFFile, i: int) -> LayerWeights:
        def required(name: str) -> WeightTensor:
            return self._tensor(f, f"blk.{i}.{name}.weight")

        def optional_vector(name: str) -> np.ndarray | None:
            full = f"blk.{i}.{name}"
            return float_vector(f.tensor(full)) if f.has_tensor(full) else None

        return LayerWeights(
            attn_norm=float_vector(required("attn_norm")),
            wq=required("attn_q"), wk=required("attn_k"), wv=required("attn_v"), wo=required("attn_output"),
            ffn_norm=float_vector(required("ffn_norm")),
            w_gate=required("ffn_gate"), w_up=required("ffn_up"), w_down=required("ffn_down"),
            bq=optional_vector("attn_q.bias"), bk=optional_vector("attn_k.bias"), bv=optional_vector("attn_v.bias"),
            q_norm=optional_vector("attn_q_norm.weight"), k_norm=optional_vector("attn_k_norm.weight"),
            post_attn_norm=optional_vector("post_attention_norm.weight"),
            post_ffw_norm=optional_vector("post_ffw_norm.weight"),
        )

    # --- what architectures override -----------------------------------------------------------------------
    def embedding_scale(self) -> float:
        return 1.0

    def attention_scale(self) -> float:
        return 1.0 / float(np.sqrt(self.hparams.head_dim))

    def kv_cache_layout(self) -> tuple[int, int, int]:
        """(KV heads, key width, value width) of one token in each layer's paged cache (MLA caches a latent)."""
        hp = self.hparams
        return hp.num_kv_heads, hp.head_dim, hp.head_dim

    # --- forward -------------------------------------------------------------------------------------------
    def forward(self, token_ids: np.ndarray, positions: np.ndarray, attn: AttnMetadata,
                kv_keys: list[np.ndarray], kv_values: list[np.ndarray]) -> np.ndarray:
        """token_ids, positions: [num_tokens] -> hidden states [num_tokens, hidden_size] (before the final norm)."""
        x = self.ops.embedding(token_ids, self.token_embedding)  # x: [T, D]
        scale = self.embedding_scale()
        if scale != 1.0:
            x = self.ops.scale(x, scale)
        positions, attn = self._backend_inputs(positions, attn)
        self.tapped_hidden: dict[int, np.ndarray] = {}  # layer id -> its output [T, D]
        plans, split = self._decode_plans(positions, attn)
        if plans is not None:  # decode tokens on the CPU: each layer in one compiled call, the rest op by op
            return self._split_forward(x, plans, split, kv_keys, kv_values)
        for layer_id, layer in enumerate(self.layers):
            x = self._layer_forward(layer_id, layer, x, positions, attn, kv_keys[layer_id], kv_values[layer_id])
            if layer_id in self.tap_layer_ids:
                # drafters read it with numpy (or where a device layer left it: a new array, never updated after)
                self.tapped_hidden[layer_id] = x if self.keep_taps_on_device else self._to_host(x)
        return self._to_host(x)

    def _decode_plans(self, positions: np.ndarray, attn: AttnMetadata) -> tuple[list | None, DecodeSplit | None]:
        """(the backend's per-layer decode plans, this batch's DecodeSplit) when the batch has decode tokens, the
        backend fuses layers (cpu) and the architecture keeps the shared layer; else (None, None)."""
        if not hasattr(self.ops, "plan_decode_layer") or not len(positions):
            return None, None
        if "_decode_layer_plans" not in self.__dict__:
            self._decode_layer_plans = self._make_decode_plans()
        plans = self._decode_layer_plans
        split = None if plans is None else split_decodes(positions, attn, min(plan.max_tokens for plan in plans))
        return (None, None) if split is None else (plans, split)

    def _split_forward(self, x: np.ndarray, plans: list, split: DecodeSplit, kv_keys: list, kv_values: list):
        """The layers with the decode tokens in the fused layer (in place on their rows) and the other tokens op
        by op, then the rows put back in batch order."""
        decode_x = np.ascontiguousarray(x[split.decode_tokens])
        rest_x = x[split.rest_tokens] if split.rest_attn is not None else None
        if (rest_x is None and not self.tap_layer_ids and hasattr(self.ops, "decode_layers")
                and self.ops.decode_layers(decode_x, plans, kv_keys, kv_values, split.block_tables, split.positions,
                                           split.slots)):  # every layer in one call (decode_stack.py)
            return self._merge_rows(x, split, decode_x, None)
        for layer_id, layer in enumerate(self.layers):
            self.ops.decode_layer(decode_x, plans[layer_id], kv_keys[layer_id], kv_values[layer_id],
                                  split.block_tables, split.positions, split.slots)
            if rest_x is not None:
                rest_x = self._layer_forward(layer_id, layer, rest_x, split.rest_positions, split.rest_attn,
                                             kv_keys[layer_id], kv_values[layer_id])
            if layer_id in self.tap_layer_ids:  # a snapshot: the fused layer goes on updating decode_x in place
                self.tapped_hidden[layer_id] = self._merge_rows(x, split, decode_x, rest_x)
        return self._merge_rows(x, split, decode_x, rest_x)

    @staticmethod
    def _merge_rows(x: np.ndarray, split: DecodeSplit, decode_x: np.ndarray, rest_x: np.ndarray | None):
        merged = np.empty_like(x)
        merged[split.decode_tokens] = decode_x
        if rest_x is not None:
            merged[split.rest_tokens] = rest_x
        return merged

    _SHARED_LAYER_METHODS = ("_layer_forward", "_attention", "_feed_forward", "_project_heads", "_linear_groups")

    def _keeps_shared_layer(self) -> bool:
        """Whether this architecture runs DecoderModel's own layer (MoE and hybrid models have their own)."""
        return all(getattr(type(self), name) is getattr(DecoderModel, name) for name in self._SHARED_LAYER_METHODS)

    @staticmethod
    def _decode_mats(w: LayerWeights) -> tuple[WeightTensor, ...]:
        """The fused decode layer's matrices, in its order."""
        return w.wq, w.wk, w.wv, w.wo, w.w_gate, w.w_up, w.w_down

    def compile_decode_step(self, kv_code: int, is_tail: bool = False) -> bool:
        """Compiles (or loads) the kernels of the fused decode step from the weights' types alone, before any
        weight is repacked or read (kernels_numba.cpu.decode_stack.compile_decode_step; is_tail: the part a first
        run's tail child takes). False where this model or backend has no fused decode layer."""
        if not hasattr(self.ops, "compile_decode_step") or not self._keeps_shared_layer():
            return False
        return self.ops.compile_decode_step([self._decode_mats(w) for w in self.layers], kv_code, is_tail=is_tail)

    def _make_decode_plans(self) -> list | None:
        if not self._keeps_shared_layer():
            return None  # MoE, hybrids: their own layer
        hp = self.hparams
        plans = [self.ops.plan_decode_layer(
            self._decode_mats(w),
            (w.attn_norm, w.q_norm, w.k_norm, w.post_attn_norm, w.ffn_norm, w.post_ffw_norm), (w.bq, w.bk, w.bv),
            num_heads=hp.num_heads, num_kv_heads=hp.num_kv_heads, head_dim=hp.head_dim, eps=hp.rms_norm_eps,
            activation=self.activation, rope_theta=hp.layer_rope_theta(i), is_neox=hp.is_neox_rope,
            rope_freq_scale=hp.layer_rope_freq_scale(i), rope_freq_factors=self.rope_freq_factors,
            scale=self.attention_scale(), sliding_window=hp.layer_sliding_window(i), softcap=hp.attn_logit_softcap)
            for i, w in enumerate(self.layers)]
        return None if any(plan is None for plan in plans) else plans

    def compute_logits(self, hidden: np.ndarray, keep_on_device: bool = False) -> np.ndarray:
        """hidden: [N, D] -> logits [N, vocab_size]; keep_on_device: a device backend's logits stay there (the
        device sampler reads only their top-k)."""
        h = self.ops.rms_norm(self.ops.contiguous(hidden), self.output_norm, self.hparams.rms_norm_eps)
        logits = self.ops.linear(h, self.lm_head)
        if self.hparams.final_logit_softcap:
            logits = self.ops.softcap(logits, self.hparams.final_logit_softcap)
        return logits if keep_on_device else self._to_host(logits)

    def _layer_forward(self, layer_id: int, w: LayerWeights, x: np.ndarray, positions: np.ndarray,
                       attn: AttnMetadata, k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, eps = self.ops, self.hparams.rms_norm_eps
        h = ops.rms_norm(x, w.attn_norm, eps)
        o = self._attention(layer_id, w, h, positions, attn, k_cache, v_cache)
        if w.post_attn_norm is not None:
            o = ops.rms_norm(o, w.post_attn_norm, eps)
        x = ops.add(x, o)
        del o  # not held through the feed-forward, the prefill's memory peak
        h = ops.rms_norm(x, w.ffn_norm, eps)
        d = self._feed_forward(w, h)
        if w.post_ffw_norm is not None:
            d = ops.rms_norm(d, w.post_ffw_norm, eps)
        return ops.add(x, d)

    def _linear_groups(self, h: np.ndarray, groups: tuple[StackedWeight, ...]) -> list[np.ndarray]:
        """h: [T, D] -> h @ W.T for each projection in `groups`, with the weights as the backend multiplies them:
        one stacked weight per group on a device (its output split into columns), one per projection on the host."""
        outputs: list[np.ndarray] = []
        for group in groups:
            ys = [self.ops.linear(h, w) for w in self.ops.stack_weights(group.parts)]
            outputs.extend(self.ops.split_columns(ys[0], group.num_rows) if len(ys) < len(group.parts) else ys)
        return outputs

    def _project_heads(self, y: np.ndarray, bias: np.ndarray | None, norm: np.ndarray | None,
                       num_heads: int) -> np.ndarray:
        """y: [T, num_heads * head_dim] projection -> [T, num_heads, head_dim], plus optional bias, per-head RMSNorm."""
        num_tokens = y.shape[0]
        if bias is not None:
            y = self.ops.add_bias(y, bias)
        head_dim = self.hparams.head_dim
        if norm is not None:
            y = self.ops.rms_norm(y.reshape(-1, head_dim), norm, self.hparams.rms_norm_eps)
        return y.reshape(num_tokens, num_heads, head_dim)

    def _attention(self, layer_id: int, w: LayerWeights, h: np.ndarray, positions: np.ndarray,
                   attn: AttnMetadata, k_cache: np.ndarray, v_cache: np.ndarray) -> np.ndarray:
        ops, hp = self.ops, self.hparams
        q, k, v = self._linear_groups(h, w.qkv_groups)
        q = self._project_heads(q, w.bq, w.q_norm, hp.num_heads)  # q: [T, H, hd]
        k = self._project_heads(k, w.bk, w.k_norm, hp.num_kv_heads)  # k: [T, KVH, hd]
        v = self._project_heads(v, w.bv, None, hp.num_kv_heads)  # v: [T, KVH, hd]
        theta, freq_scale = hp.layer_rope_theta(layer_id), hp.layer_rope_freq_scale(layer_id)
        q = ops.rope(q, positions, theta, hp.is_neox_rope, freq_scale, self.rope_freq_factors)
        k = ops.rope(k, positions, theta, hp.is_neox_rope, freq_scale, self.rope_freq_factors)
        ops.store_kv(k, v, k_cache, v_cache, attn.slot_mapping)
        o = ops.paged_attention(q, k_cache, v_cache, attn.block_tables, attn.context_lens, attn.query_start_loc,
                                self.attention_scale(), hp.layer_sliding_window(layer_id), hp.attn_logit_softcap)
        return ops.linear(o.reshape(h.shape[0], o.shape[1] * o.shape[2]), w.wo)

    def _feed_forward(self, w: LayerWeights, h: np.ndarray) -> np.ndarray:
        gate, up = self._linear_groups(h, w.gate_up_groups)
        out = gate if self.ops.can_write_into(gate) else None  # in place: a 512-token prefill holds 4 MiB less
        act = self.ops.gelu_mul(gate, up, out) if self.activation == "gelu" else self.ops.silu_mul(gate, up, out)
        del gate, up  # not held through the down projection
        return self.ops.linear(act, w.w_down)

    # --- where the arrays are ----------------------------------------------------------------------------
    def _to_host(self, x):
        """Results back to numpy for the engine, unless a device-side decode loop set keep_on_device."""
        return x if getattr(self, "keep_on_device", False) else self.ops.to_host(x)

    def _backend_inputs(self, positions, attn: AttnMetadata):
        """Positions and attention metadata where the backend computes, moved once per forward instead of once
        per layer (on the host: the same arrays, and the same AttnMetadata)."""
        up = self.ops.to_device
        moved = {"slot_mapping": up(attn.slot_mapping, np.int64), "block_tables": up(attn.block_tables, np.int32),
                 "context_lens": up(attn.context_lens, np.int32),
                 "query_start_loc": up(attn.query_start_loc, np.int32)}
        if all(value is getattr(attn, name) for name, value in moved.items()):
            return up(positions, np.int64), attn
        return up(positions, np.int64), dataclasses.replace(attn, **moved)
