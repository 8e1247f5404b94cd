"""Tiny random Qwen3-MoE, Qwen3-Next and Qwen3.5 models (transformers on CPU) saved with save_pretrained."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.hf.tiny_hf import make_tokenizer_files

ATTENTION = dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, max_position_embeddings=128, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
                 pad_token_id=0)
# two value heads per key head, so grouped and tiled value-head layouts differ
DELTANET = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_conv_kernel_dim=4)
EXPERTS = dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32, norm_topk_prob=True)


def make_config(arch: str):
    import transformers as tf

    if arch == "qwen3moe":  # layer 1 dense (mlp_only_layers), the others routed
        return tf.Qwen3MoeConfig(**ATTENTION, **EXPERTS, num_hidden_layers=3, mlp_only_layers=[1])
    if arch == "qwen35":  # layers 0-2 Gated DeltaNet, 3 full attention; partial rotary 0.25
        return tf.Qwen3_5TextConfig(**ATTENTION, **DELTANET, num_hidden_layers=4)
    if arch == "qwen3next":  # plus routed experts with a gated shared expert; grouped qkvz / ba projections
        return tf.Qwen3NextConfig(**ATTENTION, **DELTANET, **EXPERTS, num_hidden_layers=4,
                                  shared_expert_intermediate_size=48)
    if arch == "qwen35moe":  # Qwen3.5 projections with Qwen3-Next's experts (always renormalised)
        experts = {k: v for k, v in EXPERTS.items() if k != "norm_topk_prob"}
        return tf.Qwen3_5MoeTextConfig(**ATTENTION, **DELTANET, **experts, num_hidden_layers=4,
                                       shared_expert_intermediate_size=48)
    raise ValueError(arch)


def _randomize(name: str, p, zero_centered_norms: bool) -> None:
    """Weights large enough that logits differ clearly (HF init is 0.02); norms around their unit value."""
    import torch

    if name.endswith("A_log"):
        p.copy_(torch.randn_like(p) * 0.5)
    elif name.endswith("dt_bias"):
        p.copy_(torch.randn_like(p))
    elif name.endswith("conv1d.weight"):
        p.copy_(torch.randn_like(p) * 0.5)
    elif p.ndim == 1:
        unit = 0.0 if zero_centered_norms and not name.endswith("linear_attn.norm.weight") else 1.0
        p.copy_(torch.randn_like(p) * 0.1 + unit)
    else:
        p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)


def make_model(arch: str, seed: int = 0):
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = make_config(arch)
    config._attn_implementation = "eager"
    model = tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            _randomize(name, p, zero_centered_norms=arch != "qwen3moe")
    return model.eval()


def save_tiny_model(directory: Path, arch: str, seed: int = 0):
    model = make_model(arch, seed)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    make_tokenizer_files(directory)
    return model


def hf_greedy_cached(model, ids: list[int], steps: int) -> list[int]:
    """transformers' greedy continuation, with its own KV / recurrent cache."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def state_dict_numpy(model) -> dict[str, np.ndarray]:
    return {name: t.detach().float().numpy() for name, t in model.state_dict().items()}


def single_torch_thread():
    """A generator for a module-scoped fixture: torch on one thread while the module runs (tiny models: thread
    wake-ups dominate, 20x slower on a busy 2-core machine), the previous count restored after."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
