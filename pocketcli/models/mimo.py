"""Xiaomi MiMo-7B: a Qwen2 model (q/k/v biases, NeoX RoPE) with multi-token-prediction layers.

HF checkpoints (`MiMoForCausalLM`, model_type `mimo`, `num_nextn_predict_layers`) store each MTP layer as
`model.mtp_layers.{i}.*`: token_layernorm, hidden_layernorm, input_proj [D, 2D], a Qwen2 decoder block
(input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.*) and final_layernorm. The loader
stores them as block num_hidden_layers + i in llama.cpp's nextn names (enorm, hnorm, eh_proj, shared_head_norm);
input_proj keeps MiMo's [hidden, embedding] column order, which `mtp_hidden_first` tells the MTP step.
"""
from __future__ import annotations

from typing import Any

from gguf_loader import GGUFFile
from gguf_loader.hparams import ModelHParams

from .mtp_block import MTPModelMixin
from .qwen2 import Qwen2Model


class MiMoModel(MTPModelMixin, Qwen2Model):
    mtp_hidden_first = True  # input_proj(cat[hidden_layernorm(h), token_layernorm(e)]) (vLLM, SGLang mimo_mtp)
    mtp_zero_embedding_at_position_0 = True
    mtp_on_device = True

    def __init__(self, model_file: GGUFFile, hparams: ModelHParams, ops: Any):
        super().__init__(model_file, hparams, ops)
        self._split_mtp_layers(model_file, int(model_file.metadata.get("mimo.nextn_predict_layers", 0)))
