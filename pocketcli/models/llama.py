"""Llama 2/3 and Mistral: RMSNorm, normal (GPT-J style) RoPE, SwiGLU; optional rope_freqs (Llama 3.1+)."""
from .base import DecoderModel


class LlamaModel(DecoderModel):
    activation = "silu"
