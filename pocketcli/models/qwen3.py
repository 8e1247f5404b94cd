"""Qwen3: Llama with per-head RMSNorm on q and k before RoPE, NeoX RoPE, no biases."""
from .base import DecoderModel


class Qwen3Model(DecoderModel):
    activation = "silu"
