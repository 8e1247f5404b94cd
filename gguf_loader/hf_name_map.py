"""Hugging Face tensor names -> our (GGUF) tensor names, per architecture."""
from __future__ import annotations

import re

GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
# gemma3 norms the residual stream before and after both the attention and the MLP
GEMMA3_LAYER_NAMES = {
    **LAYER_NAMES, "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def gguf_name(hf_name: str, arch: str) -> str | None:
    """Our name for an HF tensor, or None when the model does not use it."""
    if hf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf_name]
    match = _LAYER_RE.match(hf_name)
    if not match:
        return None
    layer, module, kind = match.groups()
    ours = (GEMMA3_LAYER_NAMES if arch == "gemma3" else LAYER_NAMES).get(module)
    return f"blk.{layer}.{ours}.{kind}" if ours else None


def is_norm(name: str) -> bool:
    """Whether one of our names is an RMSNorm weight (gemma3 stores these as w, applied as 1 + w)."""
    return name.endswith("norm.weight")


# --- Qwen3-MoE, Qwen3-Next, Qwen3.5: routed experts, Gated DeltaNet layers, MTP (llama.cpp's GGUF names) -------
MOE_LAYER_NAMES = {
    **LAYER_NAMES, "mlp.gate": "ffn_gate_inp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
}
HYBRID_LAYER_NAMES = {
    **MOE_LAYER_NAMES, "post_attention_layernorm": "post_attention_norm",  # the FFN's pre-norm in llama.cpp
    "linear_attn.in_proj_qkv": "attn_qkv", "linear_attn.in_proj_z": "attn_gate",
    "linear_attn.in_proj_b": "ssm_beta", "linear_attn.in_proj_a": "ssm_alpha",
    "linear_attn.in_proj_qkvz": "ssm_in", "linear_attn.in_proj_ba": "ssm_ba",  # qwen3next: grouped per key head
    "linear_attn.conv1d": "ssm_conv1d", "linear_attn.out_proj": "ssm_out", "linear_attn.norm": "ssm_norm",
}
HYBRID_PARAMS = {"linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a"}  # no .weight suffix
MTP_NAMES = {"fc": "nextn.eh_proj", "pre_fc_norm_embedding": "nextn.enorm", "pre_fc_norm_hidden": "nextn.hnorm",
             "norm": "nextn.shared_head_norm"}
MOE_ARCHS = {"qwen3moe", "qwen3next", "qwen35moe"}
HYBRID_ARCHS = {"qwen3next", "qwen35", "qwen35moe"}
_PARAM_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_EXPERT_RE = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")
_FUSED_EXPERTS_RE = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")
_MTP_RE = re.compile(r"^mtp\.(fc|pre_fc_norm_embedding|pre_fc_norm_hidden|norm)\.weight$")
_MTP_LAYER_RE = re.compile(r"^mtp\.layers\.(\d+)\.(.+)$")


def strip_language_model(hf_name: str) -> str:
    """Qwen3.5 multimodal checkpoints nest the text model under model.language_model."""
    return "model." + hf_name[len("model.language_model."):] if hf_name.startswith("model.language_model.") else hf_name


def expert_slot(hf_name: str) -> tuple[str, int] | None:
    """(our stacked name, expert index) for one expert's projection (model.layers.L.mlp.experts.E.gate_proj)."""
    match = _EXPERT_RE.match(strip_language_model(hf_name))
    if not match:
        return None
    layer, expert, kind = match.groups()
    return f"blk.{layer}.ffn_{kind}_exps.weight", int(expert)


def fused_expert_slots(hf_name: str) -> list[tuple[str, int | None]]:
    """transformers 5's fused experts, as its MoE modules hold them (Qwen3MoeExperts, Qwen3NextExperts,
    Qwen3_5MoeExperts, DeepseekV3Experts) and save_pretrained(save_original_format=False) writes them:
    model.layers.L.mlp.experts.gate_up_proj [experts, 2 * intermediate, hidden], gate rows first (its forward
    chunks the output in two: gate, up), and ...experts.down_proj [experts, hidden, intermediate]. Returns
    (our stacked name, which half of the rows or None for the whole tensor) for each tensor it holds."""
    match = _FUSED_EXPERTS_RE.match(strip_language_model(hf_name))
    if not match:
        return []
    layer, kind = match.groups()
    if kind == "down_proj":
        return [(f"blk.{layer}.ffn_down_exps.weight", None)]
    return [(f"blk.{layer}.ffn_gate_exps.weight", 0), (f"blk.{layer}.ffn_up_exps.weight", 1)]


def moe_gguf_name(hf_name: str, arch: str, num_layers: int) -> str | None:
    """Our name for an HF tensor of a MoE / hybrid architecture (experts: see expert_slot), or None."""
    name = strip_language_model(hf_name)
    mtp = _MTP_RE.match(name)
    if mtp:
        return f"blk.{num_layers}.{MTP_NAMES[mtp.group(1)]}.weight"
    mtp_layer = _MTP_LAYER_RE.match(name)
    if mtp_layer:  # the MTP block is stored after the main layers, as llama.cpp does
        name = f"model.layers.{num_layers + int(mtp_layer.group(1))}.{mtp_layer.group(2)}"
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    match = _PARAM_RE.match(name)
    if not match:
        return None
    layer, rest = match.groups()
    if rest in HYBRID_PARAMS and arch in HYBRID_ARCHS:
        return f"blk.{layer}.{HYBRID_PARAMS[rest]}"
    module, _, kind = rest.rpartition(".")
    ours = (HYBRID_LAYER_NAMES if arch in HYBRID_ARCHS else MOE_LAYER_NAMES).get(module)
    return f"blk.{layer}.{ours}.{kind}" if ours and kind in ("weight", "bias") else None


def is_unit_offset_norm(name: str, arch: str) -> bool:
    """Qwen3-Next / Qwen3.5 norms apply 1 + w (GGUF stores w + 1), except the Gated DeltaNet output norm."""
    return arch in HYBRID_ARCHS and is_norm(name) and not name.endswith("ssm_norm.weight")


# --- MiMo: Qwen2 plus model.mtp_layers.{i}.* (stored as block num_hidden_layers + i, llama.cpp's nextn names) -----
MTP_ARCHS = HYBRID_ARCHS | {"mimo", "deepseek2"}  # block_count counts the MTP blocks (hf_checkpoint._add_mtp_metadata)
MIMO_MTP_NAMES = {"input_proj": "nextn.eh_proj", "token_layernorm": "nextn.enorm",
                  "hidden_layernorm": "nextn.hnorm", "final_layernorm": "nextn.shared_head_norm"}
_MIMO_MTP_RE = re.compile(r"^model\.mtp_layers\.(\d+)\.(.+)\.(weight|bias)$")


def mimo_gguf_name(hf_name: str, num_layers: int) -> str | None:
    """Our name for a MiMo tensor: the Qwen2 names, MTP layer i as block num_layers + i."""
    match = _MIMO_MTP_RE.match(hf_name)
    if not match:
        return gguf_name(hf_name, "qwen2")
    index, module, kind = match.groups()
    block = num_layers + int(index)
    if module in MIMO_MTP_NAMES:
        return f"blk.{block}.{MIMO_MTP_NAMES[module]}.{kind}"
    return gguf_name(f"model.layers.{block}.{module}.{kind}", "qwen2")  # the MTP's Qwen2 decoder block


# --- DeepSeek-V3 (llama.cpp's deepseek2 names): MLA attention, routed + shared experts, nextn layer(s) after the main
# layers, already numbered model.layers.{num_hidden_layers}.* in HF checkpoints ----------------------------------
DEEPSEEK_LAYER_NAMES = {
    **LAYER_NAMES, "self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm",
    "self_attn.q_b_proj": "attn_q_b", "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
    "self_attn.kv_a_layernorm": "attn_kv_a_norm", "self_attn.kv_b_proj": "attn_kv_b", "mlp.gate": "ffn_gate_inp",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp",
    "enorm": "nextn.enorm", "hnorm": "nextn.hnorm", "eh_proj": "nextn.eh_proj",
    "shared_head.norm": "nextn.shared_head_norm", "shared_head.head": "nextn.shared_head_head",
    "embed_tokens": "nextn.embed_tokens",
}


def deepseek_gguf_name(hf_name: str) -> str | None:
    """Our name for a DeepSeek-V3 tensor (experts: see expert_slot), or None."""
    if hf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf_name]
    match = _PARAM_RE.match(hf_name)
    if not match:
        return None
    layer, rest = match.groups()
    if rest == "mlp.gate.e_score_correction_bias":  # the router's selection bias
        return f"blk.{layer}.exp_probs_b.bias"
    module, _, kind = rest.rpartition(".")
    ours = DEEPSEEK_LAYER_NAMES.get(module)
    return f"blk.{layer}.{ours}.{kind}" if ours and kind in ("weight", "bias") else None
