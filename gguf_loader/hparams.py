"""Model hyper-parameters read from GGUF metadata, per architecture."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ModelFileError

# architectures whose rotary embedding rotates (x[i], x[i + d/2]) pairs (llama.cpp's LLAMA_ROPE_TYPE_NEOX)
NEOX_ROPE_ARCHS = {"qwen2", "qwen3", "gemma3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe"}
# mixture-of-experts and hybrid (Gated DeltaNet) architectures: their extra keys land in ModelHParams.extra
MOE_ARCHS = {"qwen3moe", "qwen3next", "qwen35moe"}
HYBRID_ARCHS = {"qwen3next", "qwen35", "qwen35moe"}
# gemma3 sliding-window layers use a fixed local rope base (llama.cpp: freq_base_swa = 10000)
GEMMA3_ROPE_BASE_SWA = 10_000.0
GEMMA3_SWA_PATTERN = 6  # layers 0..4 of every 6 slide, the 6th is global


@dataclass(frozen=True)
class ModelHParams:
    arch: str
    vocab_size: int
    context_length: int
    hidden_size: int
    num_layers: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    is_neox_rope: bool
    rope_freq_scale: float = 1.0
    rope_theta_swa: float = 0.0  # 0: sliding layers use rope_theta
    sliding_window: int = 0  # 0: no sliding-window layers
    sliding_window_pattern: int = 0  # every n-th layer (the last of each group) attends globally
    attn_logit_softcap: float = 0.0
    final_logit_softcap: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.num_heads % max(self.num_kv_heads, 1):
            raise ModelFileError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")

    def is_sliding_layer(self, layer_id: int) -> bool:
        if not self.sliding_window or not self.sliding_window_pattern:
            return False
        return layer_id % self.sliding_window_pattern < self.sliding_window_pattern - 1

    def layer_sliding_window(self, layer_id: int) -> int:
        return self.sliding_window if self.is_sliding_layer(layer_id) else 0

    def layer_rope_theta(self, layer_id: int) -> float:
        if self.is_sliding_layer(layer_id) and self.rope_theta_swa:
            return self.rope_theta_swa
        return self.rope_theta

    def layer_rope_freq_scale(self, layer_id: int) -> float:
        # gemma3 applies linear rope scaling to global layers only
        return 1.0 if self.is_sliding_layer(layer_id) else self.rope_freq_scale


def _get(metadata: dict[str, Any], key: str, default: Any = None) -> Any:
    if key in metadata:
        return metadata[key]
    if default is None:
        raise ModelFileError(f"model metadata is missing {key}")
    return default


def read_hparams(metadata: dict[str, Any], vocab_size: int) -> ModelHParams:
    arch = metadata["general.architecture"]
    p = f"{arch}."
    hidden_size = int(_get(metadata, p + "embedding_length"))
    num_heads = int(_get(metadata, p + "attention.head_count"))
    num_kv_heads = int(_get(metadata, p + "attention.head_count_kv", num_heads))
    head_dim = int(_get(metadata, p + "attention.key_length", hidden_size // num_heads))
    scaling_type = metadata.get(p + "rope.scaling.type", "none")
    scaling_factor = float(metadata.get(p + "rope.scaling.factor", 1.0) or 1.0)
    freq_scale = 1.0 / scaling_factor if scaling_type == "linear" or arch == "gemma3" else 1.0
    is_gemma3 = arch == "gemma3"
    return ModelHParams(
        arch=arch,
        vocab_size=vocab_size,
        context_length=int(_get(metadata, p + "context_length")),
        hidden_size=hidden_size,
        num_layers=int(_get(metadata, p + "block_count")),
        intermediate_size=int(_get(metadata, p + "feed_forward_length", 0 if arch in MOE_ARCHS else None)),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(_get(metadata, p + "attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(_get(metadata, p + "rope.freq_base", 10_000.0)),
        is_neox_rope=bool(metadata.get(p + "rope.is_neox", arch in NEOX_ROPE_ARCHS)),  # HF llama: rotate-half
        rope_freq_scale=freq_scale,
        rope_theta_swa=float(metadata.get(p + "rope.freq_base_swa", GEMMA3_ROPE_BASE_SWA)) if is_gemma3 else 0.0,
        sliding_window=int(metadata.get(p + "attention.sliding_window", 0)) if is_gemma3 else 0,
        sliding_window_pattern=(int(metadata.get(p + "attention.sliding_window_pattern", GEMMA3_SWA_PATTERN))
                                if is_gemma3 else 0),
        attn_logit_softcap=float(metadata.get(p + "attn_logit_softcapping", 0.0)),
        final_logit_softcap=float(metadata.get(p + "final_logit_softcapping", 0.0)),
        extra=_moe_extra(metadata, arch) | _hybrid_extra(metadata, arch, head_dim),
    )


def _moe_extra(metadata: dict[str, Any], arch: str) -> dict[str, Any]:
    """Expert counts and sizes (llama.cpp keys); qwen3moe GGUFs renormalise the top-k weights by default."""
    if arch not in MOE_ARCHS:
        return {}
    p = f"{arch}."
    return {
        "expert_count": int(_get(metadata, p + "expert_count")),
        "expert_used_count": int(_get(metadata, p + "expert_used_count")),
        "expert_feed_forward_length": int(metadata.get(p + "expert_feed_forward_length", 0)),
        "expert_shared_feed_forward_length": int(metadata.get(p + "expert_shared_feed_forward_length", 0)),
        "expert_weights_norm": bool(metadata.get(p + "expert_weights_norm", True)),
    }


def _hybrid_extra(metadata: dict[str, Any], arch: str, head_dim: int) -> dict[str, Any]:
    """Gated DeltaNet sizes, the full-attention layout, partial rotary dims and MTP layers (llama.cpp keys)."""
    if arch not in HYBRID_ARCHS:
        return {}
    p = f"{arch}."
    value_heads = int(_get(metadata, p + "ssm.time_step_rank"))
    return {
        "ssm_conv_kernel": int(_get(metadata, p + "ssm.conv_kernel")),
        "ssm_key_dim": int(_get(metadata, p + "ssm.state_size")),
        "ssm_key_heads": int(_get(metadata, p + "ssm.group_count")),
        "ssm_value_heads": value_heads,
        "ssm_value_dim": int(_get(metadata, p + "ssm.inner_size")) // value_heads,
        "full_attention_interval": int(metadata.get(p + "full_attention_interval", 4)),
        "recurrent_layers": metadata.get(p + "attention.recurrent_layers"),
        "rope_dim": int(metadata.get(p + "rope.dimension_count", head_dim)),
        "nextn_predict_layers": int(metadata.get(p + "nextn_predict_layers", 0)),
        # llama.cpp's qwen35 converter reorders value heads to a tiled layout (head j uses key head j % H_k);
        # qwen3next GGUFs and HF checkpoints keep them grouped (head j uses key head j // (H_v / H_k))
        "ssm_value_heads_grouped": bool(metadata.get("pocket.ssm.value_heads_grouped", arch == "qwen3next")),
    }
