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
