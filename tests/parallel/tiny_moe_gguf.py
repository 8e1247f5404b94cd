"""A tiny random Qwen3-MoE GGUF (numpy only): llama.cpp's names, stacked 3-D experts, a router per layer."""
from __future__ import annotations

import gguf
import numpy as np

from tests.models.tiny_gguf import TINY_CONFIGS, _add_vocab, finish_gguf

D, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, EXPERT_FF, TOP_K, VOCAB, LAYERS = 64, 4, 2, 16, 4, 32, 2, 320, 2


def write_tiny_moe(path, seed: int = 0):
    rng = np.random.default_rng(seed)

    def linear(*shape):  # 1/sqrt(fan_in): activations stay O(1)
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors = {"token_embd.weight": (0.25 * rng.standard_normal((VOCAB, D))).astype(np.float32)}
    for il in range(LAYERS):
        p = f"blk.{il}."
        tensors.update({
            p + "attn_norm.weight": norm(D), p + "attn_q.weight": linear(HEADS * HEAD_DIM, D),
            p + "attn_k.weight": linear(KV_HEADS * HEAD_DIM, D), p + "attn_v.weight": linear(KV_HEADS * HEAD_DIM, D),
            p + "attn_q_norm.weight": norm(HEAD_DIM), p + "attn_k_norm.weight": norm(HEAD_DIM),
            p + "attn_output.weight": linear(D, HEADS * HEAD_DIM), p + "ffn_norm.weight": norm(D),
            p + "ffn_gate_inp.weight": linear(EXPERTS, D), p + "ffn_gate_exps.weight": linear(EXPERTS, EXPERT_FF, D),
            p + "ffn_up_exps.weight": linear(EXPERTS, EXPERT_FF, D),
            p + "ffn_down_exps.weight": linear(EXPERTS, D, EXPERT_FF)})
    tensors["output_norm.weight"] = norm(D)
    tensors["output.weight"] = 2.0 * linear(VOCAB, D)
    writer = gguf.GGUFWriter(str(path), "qwen3moe")
    for add, value in ((writer.add_context_length, 256), (writer.add_embedding_length, D),
                       (writer.add_block_count, LAYERS), (writer.add_feed_forward_length, EXPERT_FF),
                       (writer.add_head_count, HEADS), (writer.add_head_count_kv, KV_HEADS),
                       (writer.add_key_length, HEAD_DIM), (writer.add_value_length, HEAD_DIM),
                       (writer.add_layer_norm_rms_eps, 1e-6), (writer.add_rope_freq_base, 1e6),
                       (writer.add_expert_count, EXPERTS), (writer.add_expert_used_count, TOP_K),
                       (writer.add_expert_feed_forward_length, EXPERT_FF)):
        add(value)
    _add_vocab(writer, TINY_CONFIGS["qwen3"])
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    finish_gguf(writer)
    return path
