"""Tiny random checkpoints that carry a drafter's weights: MiMo `mtp_layers`, DeepSeek-V3 `nextn`, Qwen3.5 `mtp.*`
(HF safetensors built with transformers) and a z-lab DFlash drafter for a tiny qwen3 GGUF target. Shared by the
speculative-decoding tests and bench/spec_fixtures.py."""
from __future__ import annotations

import json
import shutil

import numpy as np

from tests.hf.tiny_hf import make_tokenizer_files
from tests.models.tiny_gguf import TINY_CONFIGS

DEEPSEEK_HIDDEN, DEEPSEEK_LAYERS = 64, 3
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
# DFlash drafter shape: hidden, layers, heads, KV heads, head dim, FFN, block size, mask token id
D, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FF, BLOCK, MASK = 64, 2, 4, 2, 16, 96, 4, 3
TARGET_LAYERS = [0, 2]


def add_mimo_mtp_layer(source, target, echo: bool = False):
    """A MiMo checkpoint from a saved tiny Qwen2: config.json as MiMo's, plus model.mtp_layers.0.* (its decoder
    block a perturbed copy of the last layer). echo=True: input_proj passes the hidden half and the block's residual
    branches are weak, so the MTP predicts the target's own next token again (drafts that are often right when
    the target repeats itself, which exercises acceptance)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(architectures=["MiMoForCausalLM"], model_type="mimo", num_nextn_predict_layers=1)
    hidden, last = config["hidden_size"], config["num_hidden_layers"] - 1  # the block: a copy of the last layer
    (target / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(target / "model.safetensors"))
    rng = np.random.default_rng(5)
    prefix = "model.mtp_layers.0."
    last_prefix = f"model.layers.{last}."
    block = {prefix + name[len(last_prefix):]: array + rng.normal(0, 0.05, array.shape).astype(np.float32)
             for name, array in tensors.items() if name.startswith(last_prefix)}
    if echo:
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            block[prefix + name] *= np.float32(0.1)
    input_proj = rng.normal(0, (2 * hidden) ** -0.5, (hidden, 2 * hidden)).astype(np.float32)
    if echo:  # MiMo's column order: [hidden | embedding]
        input_proj = np.concatenate([np.eye(hidden), np.zeros((hidden, hidden))], axis=1).astype(np.float32)
    tensors.update(block)
    tensors.update({prefix + "input_proj.weight": input_proj,
                    prefix + "token_layernorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
                    prefix + "hidden_layernorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
                    prefix + "final_layernorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32)})
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target



def make_deepseek_config(rope_parameters=None, max_position_embeddings=128):
    import transformers as tf

    return tf.DeepseekV3Config(
        vocab_size=320, hidden_size=DEEPSEEK_HIDDEN, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=DEEPSEEK_LAYERS,
        first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        n_shared_experts=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, routed_scaling_factor=2.5, norm_topk_prob=True,
        max_position_embeddings=max_position_embeddings, rope_parameters=rope_parameters or DEFAULT_ROPE,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0, num_nextn_predict_layers=1)


def save_tiny_deepseek(directory, config=None):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = config or make_deepseek_config()
    config._attn_implementation = "eager"
    model = tf.DeepseekV3ForCausalLM(config)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + 1.0 if p.ndim == 1 else torch.randn_like(p) / p.shape[-1] ** 0.5)
        for layer in model.model.layers[config.first_k_dense_replace:]:
            bias = layer.mlp.gate.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape) * 0.1)
    model.eval().save_pretrained(directory)
    make_tokenizer_files(directory)
    return model


def add_nextn_layer(source, target):
    """The checkpoint plus model.layers.{L}.* (DeepSeek-V3's MTP layer, which transformers does not load; L =
    num_hidden_layers of its config.json): a perturbed copy of the last (MoE) layer plus enorm, hnorm, eh_proj and
    shared_head (head = a copy of lm_head)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    tensors = load_file(str(target / "model.safetensors"))
    rng = np.random.default_rng(9)
    last, mtp = f"model.layers.{layers - 1}.", f"model.layers.{layers}."
    tensors.update({mtp + name[len(last):]: array + rng.normal(0, 0.05, array.shape).astype(np.float32)
                    for name, array in list(tensors.items()) if name.startswith(last)})
    eh_proj = rng.normal(0, (2 * hidden) ** -0.5, (hidden, 2 * hidden)).astype(np.float32)
    tensors.update({mtp + "eh_proj.weight": eh_proj,
                    mtp + "enorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
                    mtp + "hnorm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
                    mtp + "shared_head.norm.weight": (1 + rng.normal(0, 0.1, hidden)).astype(np.float32),
                    mtp + "shared_head.head.weight": tensors["lm_head.weight"].copy(),
                    mtp + "embed_tokens.weight": tensors["model.embed_tokens.weight"].copy()})
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target



def add_qwen35_mtp_weights(source, target, d: int = 64, full_layer: int = 3):
    """A copy of a saved tiny Qwen3.5 (hidden size d) with mtp.* tensors (which transformers ignores): one MTP block
    shaped like the full-attention layer `full_layer`, random projection and norms."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(source, target)
    tensors = load_file(str(target / "model.safetensors"))
    rng = np.random.default_rng(3)
    full = f"model.layers.{full_layer}."
    tensors.update({name.replace(full, "mtp.layers.0."): array + rng.normal(0, 0.05, array.shape).astype(np.float32)
                    for name, array in tensors.items() if name.startswith(full)})
    tensors.update({"mtp.fc.weight": rng.normal(0, (2 * d) ** -0.5, (d, 2 * d)).astype(np.float32),
                    "mtp.pre_fc_norm_embedding.weight": np.zeros(d, np.float32),
                    "mtp.pre_fc_norm_hidden.weight": np.full(d, 0.5, np.float32),
                    "mtp.norm.weight": rng.normal(0, 0.1, d).astype(np.float32)})
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def write_dflash_checkpoint(directory, seed=0):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)

    def linear(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    d_target = TINY_CONFIGS["qwen3"].n_embd
    weights = {"fc.weight": linear(D, len(TARGET_LAYERS) * d_target), "hidden_norm.weight": norm(D),
               "norm.weight": norm(D)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        weights.update({p + "input_layernorm.weight": norm(D), p + "post_attention_layernorm.weight": norm(D),
                        p + "self_attn.q_proj.weight": linear(HEADS * HEAD_DIM, D),
                        p + "self_attn.k_proj.weight": linear(KV_HEADS * HEAD_DIM, D),
                        p + "self_attn.v_proj.weight": linear(KV_HEADS * HEAD_DIM, D),
                        p + "self_attn.o_proj.weight": linear(D, HEADS * HEAD_DIM),
                        p + "self_attn.q_norm.weight": norm(HEAD_DIM), p + "self_attn.k_norm.weight": norm(HEAD_DIM),
                        p + "mlp.gate_proj.weight": linear(FF, D), p + "mlp.up_proj.weight": linear(FF, D),
                        p + "mlp.down_proj.weight": linear(D, FF)})
    directory.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(directory / "model.safetensors"))
    config = {"architectures": ["DFlashDraftModel"], "hidden_size": D, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
              "intermediate_size": FF, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "block_size": BLOCK,
              "num_target_layers": TINY_CONFIGS["qwen3"].n_layer,
              "dflash_config": {"mask_token_id": MASK, "target_layer_ids": TARGET_LAYERS}}
    (directory / "config.json").write_text(json.dumps(config))
    return weights

