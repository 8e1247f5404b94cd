"""A Hugging Face config.json as the GGUF metadata keys that read_hparams understands."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import ModelFileError, UnsupportedModelError
from .yarn_rope import yarn_gguf_metadata

# HF architectures / model_type -> our architecture name
HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Gemma3ForCausalLM": "gemma3",
}
HF_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3"}
HF_ARCHITECTURES.update({"Qwen3MoeForCausalLM": "qwen3moe", "Qwen3NextForCausalLM": "qwen3next",
                         "Qwen3_5ForCausalLM": "qwen35", "Qwen3_5ForConditionalGeneration": "qwen35",
                         "Qwen3_5MoeForCausalLM": "qwen35moe", "Qwen3_5MoeForConditionalGeneration": "qwen35moe"})
HF_ARCHITECTURES["MiMoForCausalLM"] = "mimo"  # Qwen2 + MTP layers (model.mtp_layers.*)
HF_MODEL_TYPES["mimo"] = "mimo"
HF_ARCHITECTURES["DeepseekV3ForCausalLM"] = "deepseek2"  # llama.cpp's name for DeepSeek-V2/V3 (MLA + MoE)
HF_MODEL_TYPES["deepseek_v3"] = "deepseek2"
HF_MODEL_TYPES.update({"qwen3_moe": "qwen3moe", "qwen3_next": "qwen3next", "qwen3_5_text": "qwen35",
                       "qwen3_5_moe_text": "qwen35moe"})
YARN_ARCHS = {"deepseek2"}  # whose models apply YaRN (pocketcli.models.deepseek_v3)


def hf_architecture(config: dict, where: str) -> str:
    for name in config.get("architectures") or []:
        if name in HF_ARCHITECTURES:
            return HF_ARCHITECTURES[name]
    model_type = config.get("model_type")
    if model_type in HF_MODEL_TYPES and not config.get("architectures"):
        return HF_MODEL_TYPES[model_type]
    named = ", ".join(config.get("architectures") or []) or model_type or "none"
    raise UnsupportedModelError(f"{where}: unsupported architecture '{named}' "
                                f"(supported: {', '.join(HF_ARCHITECTURES)})")


def _rope_parameters(config: dict, layer_type: str) -> dict:
    """transformers 5 `rope_parameters` (flat, or per layer type) or the older rope_theta + rope_scaling."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and layer_type in params:
        params = params[layer_type]
    if isinstance(params, dict) and "rope_theta" in params:
        return params
    params = dict(config.get("rope_scaling") or {})
    if layer_type == "sliding_attention":
        return {"rope_type": "default", "rope_theta": config.get("rope_local_base_freq", 10_000.0)}
    params.setdefault("rope_theta", config.get("rope_theta", 10_000.0))
    return params


def rope_metadata(arch: str, config: dict, where: str) -> tuple[dict[str, Any], dict]:
    """GGUF rope keys and the full-attention rope parameters (for llama3 frequency factors)."""
    params = _rope_parameters(config, "full_attention")
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    out: dict[str, Any] = {f"{arch}.rope.freq_base": float(params["rope_theta"])}
    if rope_type == "linear":
        out[f"{arch}.rope.scaling.type"] = "linear"
        out[f"{arch}.rope.scaling.factor"] = float(params["factor"])
    elif rope_type == "yarn" and arch in YARN_ARCHS:
        out.update(yarn_gguf_metadata(arch, params, int(config.get("max_position_embeddings", 4096)), where))
    elif rope_type not in ("default", "llama3"):
        raise UnsupportedModelError(f"{where}: rope scaling type '{rope_type}' is not supported "
                                    f"(supported: linear, llama3; yarn for DeepSeek-V3)")
    if arch == "gemma3":
        out["gemma3.rope.freq_base_swa"] = float(_rope_parameters(config, "sliding_attention")["rope_theta"])
    return out, params


def llama3_freq_factors(params: dict, head_dim: int) -> np.ndarray | None:
    """llama.cpp's rope_freqs for rope_type llama3 (the divisor of each pair's inverse frequency)."""
    if params.get("rope_type", params.get("type")) != "llama3":
        return None
    factor, low, high = float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_context = float(params["original_max_position_embeddings"])
    inv_freq = 1.0 / float(params["rope_theta"]) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factors = []
    for freq in inv_freq:
        wavelen = 2 * math.pi / freq
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def sliding_pattern(config: dict, num_layers: int, where: str) -> int:
    """n such that every layer but each n-th is a sliding one (hparams' layout), from layer_types or the
    older sliding_window_pattern; 0 when no layer slides."""
    layer_types = config.get("layer_types")
    if not layer_types:
        return int(config.get("sliding_window_pattern") or 6)
    sliding = [t == "sliding_attention" for t in layer_types]
    if not any(sliding):
        return 0
    pattern = sliding.index(False) + 1 if not all(sliding) else num_layers + 1
    if any(s != (i % pattern < pattern - 1) for i, s in enumerate(sliding)):
        raise UnsupportedModelError(f"{where}: layer_types {layer_types} do not follow an n-1 sliding : "
                                    f"1 global pattern")
    return pattern


def hf_metadata(config: dict, where: str) -> dict[str, Any]:
    """GGUF-style metadata (general.architecture, <arch>.block_count, ...) for an HF config."""
    arch = hf_architecture(config, where)
    if isinstance(config.get("text_config"), dict):  # Qwen3.5 multimodal: the text model's config is nested
        config = {**config["text_config"], "architectures": config.get("architectures")}
    try:
        hidden, num_heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        num_layers = int(config["num_hidden_layers"])
        meta: dict[str, Any] = {
            "general.architecture": arch,
            f"{arch}.context_length": int(config.get("max_position_embeddings", 4096)),
            f"{arch}.embedding_length": hidden,
            f"{arch}.block_count": num_layers,
            f"{arch}.feed_forward_length": int(config["intermediate_size"]),
            f"{arch}.attention.head_count": num_heads,
            f"{arch}.attention.head_count_kv": int(config.get("num_key_value_heads") or num_heads),
            f"{arch}.attention.key_length": int(config.get("head_dim") or hidden // num_heads),
            f"{arch}.attention.layer_norm_rms_epsilon": float(config.get("rms_norm_eps", 1e-6)),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{where}: config.json is missing or has a bad {exc}") from None
    rope, _ = rope_metadata(arch, config, where)
    meta.update(rope)
    if arch == "llama":
        meta["llama.rope.is_neox"] = True  # HF llama q/k are not permuted like GGUF's: rotate-half pairs
        if config.get("attention_bias") or config.get("mlp_bias"):
            raise UnsupportedModelError(f"{where}: llama with attention_bias/mlp_bias is not supported")
    if arch == "mimo":
        meta["mimo.rope.is_neox"] = True  # Qwen2's rotate-half RoPE
    if arch in ("qwen2", "qwen3", "mimo") and config.get("use_sliding_window"):
        raise UnsupportedModelError(f"{where}: {arch} with use_sliding_window is not supported")
    if arch == "gemma3":
        pattern = sliding_pattern(config, num_layers, where)
        meta["gemma3.attention.sliding_window"] = int(config.get("sliding_window") or 0) if pattern else 0
        meta["gemma3.attention.sliding_window_pattern"] = pattern
        for key in ("final_logit_softcapping", "attn_logit_softcapping"):
            if config.get(key):
                meta[f"gemma3.{key}"] = float(config[key])
    meta.update(moe_metadata(arch, config) | hybrid_metadata(arch, config, meta) | deepseek_metadata(arch, config))
    return meta


def deepseek_metadata(arch: str, config: dict) -> dict[str, Any]:
    """llama.cpp's deepseek2 keys: MLA ranks and head sizes (K/V expanded per head, so head_count_kv = head_count
    and key_length = nope + rope dims), the sigmoid group-limited router, the leading dense layers."""
    if arch != "deepseek2":
        return {}
    if not config.get("rope_interleave", True):
        raise UnsupportedModelError("deepseek_v3 with rope_interleave false is not supported")
    nope, rope = int(config["qk_nope_head_dim"]), int(config["qk_rope_head_dim"])
    p = "deepseek2."
    return {
        p + "attention.head_count_kv": int(config["num_attention_heads"]),
        p + "attention.key_length": nope + rope, p + "attention.value_length": int(config["v_head_dim"]),
        p + "attention.q_lora_rank": int(config.get("q_lora_rank") or 0),
        p + "attention.kv_lora_rank": int(config["kv_lora_rank"]), p + "rope.dimension_count": rope,
        p + "leading_dense_block_count": int(config.get("first_k_dense_replace", 0)),
        p + "expert_count": int(config["n_routed_experts"]),
        p + "expert_used_count": int(config["num_experts_per_tok"]),
        p + "expert_feed_forward_length": int(config["moe_intermediate_size"]),
        p + "expert_shared_count": int(config.get("n_shared_experts") or 0),
        p + "expert_weights_scale": float(config.get("routed_scaling_factor", 1.0)),
        p + "expert_weights_norm": bool(config.get("norm_topk_prob", True)),
        p + "expert_group_count": int(config.get("n_group") or 1),
        p + "expert_group_used_count": int(config.get("topk_group") or 1),
        p + "expert_gating_func": 2,  # sigmoid (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID)
    }


def moe_metadata(arch: str, config: dict) -> dict[str, Any]:
    """llama.cpp's expert keys for a Qwen3-MoE / Qwen3-Next config (empty for dense models)."""
    num_experts = config.get("num_experts") or config.get("num_local_experts")  # transformers 5 saves the latter
    if not num_experts:
        return {}
    return {
        f"{arch}.expert_count": int(num_experts),
        f"{arch}.expert_used_count": int(config["num_experts_per_tok"]),
        f"{arch}.expert_feed_forward_length": int(config["moe_intermediate_size"]),
        f"{arch}.expert_shared_feed_forward_length": int(config.get("shared_expert_intermediate_size") or 0),
        # Qwen3-MoE renormalises only with norm_topk_prob; Qwen3.5-MoE always does (no such key)
        f"{arch}.expert_weights_norm": bool(config.get("norm_topk_prob", arch != "qwen3moe")),
    }


def hybrid_metadata(arch: str, config: dict, meta: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's Gated DeltaNet keys, the layer layout and the partial rotary dims for Qwen3-Next / Qwen3.5."""
    if arch not in ("qwen3next", "qwen35", "qwen35moe"):
        return {}
    interval = int(config.get("full_attention_interval") or 4)
    num_layers = meta[f"{arch}.block_count"]
    layer_types = config.get("layer_types") or [
        "linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]
    params = config.get("rope_parameters") or {}
    factor = float(params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)))
    value_heads = int(config["linear_num_value_heads"])
    return {
        f"{arch}.ssm.conv_kernel": int(config["linear_conv_kernel_dim"]),
        f"{arch}.ssm.state_size": int(config["linear_key_head_dim"]),
        f"{arch}.ssm.group_count": int(config["linear_num_key_heads"]),
        f"{arch}.ssm.time_step_rank": value_heads,
        f"{arch}.ssm.inner_size": value_heads * int(config["linear_value_head_dim"]),
        f"{arch}.full_attention_interval": interval,
        f"{arch}.attention.recurrent_layers": [t == "linear_attention" for t in layer_types],
        f"{arch}.rope.dimension_count": int(meta[f"{arch}.attention.key_length"] * factor),
        "pocket.ssm.value_heads_grouped": True,  # HF keeps value heads grouped per key head
    }
