"""A DFlash draft model from a llama.cpp GGUF (arch `dflash`, llama.cpp PR #22105 / #25110), as the config and
the float32 weights, under z-lab's safetensors names, that DFlashModel runs.

llama.cpp's layout (src/models/dflash.cpp `load_arch_tensors`, conversion/qwen.py `DFlashModel`):
* tensors `fc.weight`, `enc.output_norm.weight` (z-lab's hidden_norm), `output_norm.weight` (the final norm),
  Qwen3 block names `blk.i.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm,
  ffn_gate, ffn_up, ffn_down}`; norms stored as they are (plain Qwen3 RMSNorm, no +1); the optional
  `token_embd` / `output` are not used (the target's embedding and head are).
* metadata `dflash.target_layers`, in llama.cpp's "+1" convention: the runtime taps the INPUT of layer id, so the
  file holds z-lab's target_layer_ids + 1 (the output of layer id - 1); `dflash.block_size`; the mask token is
  `tokenizer.ggml.mask_token_id` (older converters: `dflash.mask_token_id`).
Forks named the two fusion tensors differently (`hidden_norm`, `dflash_fc` / `dflash_hidden_norm`); those names
are accepted too.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gguf_loader.reader import open_gguf
from kernels_numba.reference import dequantize

from ...models.dflash import DFlashCheckpointError, DFlashConfig

DFLASH_ARCHS = ("dflash", "dflash-draft")
TOP_LEVEL_NAMES = {  # z-lab name -> GGUF names, llama.cpp's first
    "fc.weight": ("fc.weight", "dflash_fc.weight", "dflash.fc.weight"),
    "hidden_norm.weight": ("enc.output_norm.weight", "hidden_norm.weight", "dflash_hidden_norm.weight",
                           "dflash.hidden_norm.weight"),
    "norm.weight": ("output_norm.weight",),
}
BLOCK_NAMES = {  # z-lab name under layers.{i}. -> GGUF names under blk.{i}.
    "input_layernorm.weight": ("attn_norm.weight",),
    "self_attn.q_proj.weight": ("attn_q.weight",), "self_attn.k_proj.weight": ("attn_k.weight",),
    "self_attn.v_proj.weight": ("attn_v.weight",), "self_attn.o_proj.weight": ("attn_output.weight",),
    "self_attn.q_norm.weight": ("attn_q_norm.weight",), "self_attn.k_norm.weight": ("attn_k_norm.weight",),
    "post_attention_layernorm.weight": ("ffn_norm.weight", "post_attention_norm.weight"),
    "mlp.gate_proj.weight": ("ffn_gate.weight",), "mlp.up_proj.weight": ("ffn_up.weight",),
    "mlp.down_proj.weight": ("ffn_down.weight",),
}


def is_dflash_gguf(path: str) -> bool:
    return str(path).endswith(".gguf")


def load_dflash_gguf(path: str) -> tuple[DFlashConfig, dict[str, np.ndarray]]:
    model_file = open_gguf(path)
    meta = model_file.metadata
    arch = meta.get("general.architecture")
    if arch not in DFLASH_ARCHS:
        raise DFlashCheckpointError(f"{path}: a GGUF of architecture {arch!r}, not a DFlash draft model "
                                    f"(general.architecture 'dflash')")
    config = _config(path, meta, arch)
    names = set(model_file.tensor_infos)

    def weight(ours: str, candidates: tuple[str, ...]) -> np.ndarray:
        found = next((name for name in candidates if name in names), None)
        if found is None:
            raise DFlashCheckpointError(f"{path}: DFlash GGUF lacks tensor {candidates[0]}")
        tensor = model_file.tensor(found)
        return dequantize(tensor).reshape(tensor.shape).astype(np.float32, copy=False)

    weights = {ours: weight(ours, candidates) for ours, candidates in TOP_LEVEL_NAMES.items()}
    for i in range(config.num_layers):
        weights.update({f"layers.{i}.{ours}": weight(ours, tuple(f"blk.{i}.{name}" for name in candidates))
                        for ours, candidates in BLOCK_NAMES.items()})
    return config, weights


def _config(path: str, meta: dict[str, Any], arch: str) -> DFlashConfig:
    def key(name: str, default: Any = None) -> Any:
        for full in (f"{arch}.{name}", f"{arch}.dflash.{name}"):
            if full in meta:
                return meta[full]
        if default is None:
            raise DFlashCheckpointError(f"{path}: DFlash GGUF lacks metadata {arch}.{name}")
        return default

    mask = meta.get("tokenizer.ggml.mask_token_id", meta.get(f"{arch}.mask_token_id"))
    if mask is None:
        raise DFlashCheckpointError(f"{path}: DFlash GGUF lacks tokenizer.ggml.mask_token_id")
    tapped_inputs = [int(layer) for layer in key("target_layers")]
    if min(tapped_inputs) < 1:
        raise DFlashCheckpointError(f"{path}: target layer input {min(tapped_inputs)} is the embedding output, "
                                    f"which DFlash drafters are not trained on")
    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    return DFlashConfig(
        hidden_size=hidden, num_layers=int(key("block_count")), num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=int(key("attention.key_length", hidden // heads)),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(key("rope.freq_base", 1_000_000.0)), block_size=int(key("block_size")),
        mask_token_id=int(mask),
        target_layer_ids=tuple(layer - 1 for layer in tapped_inputs))  # back to z-lab's layer-output ids
