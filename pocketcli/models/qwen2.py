"""Qwen2 / Qwen2.5: Llama with q/k/v biases and NeoX RoPE (biases are loaded by the base when present)."""
from .base import DecoderModel


class Qwen2Model(DecoderModel):
    activation = "silu"
