"""Tiny random Hugging Face models (transformers on CPU, save_pretrained) for every architecture we run."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ARCHS = ["llama", "qwen2", "qwen3", "gemma3"]
VOCAB_SIZE = 320
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello tokens", "pocket llm runs models"] * 20


def make_config(arch: str):
    import transformers as tf

    common = dict(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "llama":  # llama3 rope frequency factors, untied head
        return tf.LlamaConfig(**common, tie_word_embeddings=False, rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    if arch == "qwen2":  # q/k/v biases, tied head
        return tf.Qwen2Config(**common, tie_word_embeddings=True, rope_parameters={"rope_type": "default",
                                                                                   "rope_theta": 1e6})
    if arch == "qwen3":  # head_dim != hidden / heads, q/k norms
        return tf.Qwen3Config(**common, head_dim=32, tie_word_embeddings=False)
    if arch == "gemma3":  # 1:1 sliding/global, small window, query_pre_attn_scalar != head_dim, linear scaling
        return tf.Gemma3TextConfig(
            **common, head_dim=16, query_pre_attn_scalar=24, sliding_window=5,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}})
    raise ValueError(arch)


def make_model(arch: str, seed: int = 0):
    """A tiny transformers model with weights large enough that logits are not all ~0 (HF init is 0.02)."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = make_config(arch)
    config._attn_implementation = "eager"
    cls = tf.Gemma3ForCausalLM if arch == "gemma3" else tf.AutoModelForCausalLM
    model = cls.from_config(config) if cls is tf.AutoModelForCausalLM else cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (0.0 if arch == "gemma3" else 1.0))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    return model.eval()


def make_tokenizer_files(directory: Path) -> None:
    """A byte-level BPE tokenizer.json plus tokenizer_config.json with specials and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "chat_template": CHAT_TEMPLATE,
              "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 4], "bos_token_id": 1}))


def save_tiny_model(directory: Path, arch: str, dtype: str = "float32", seed: int = 0, max_shard_size=None):
    """save_pretrained a tiny model in `dtype` ("float32" or "bfloat16"); returns the model (in that dtype)."""
    import torch

    model = make_model(arch, seed).to(getattr(torch, dtype))
    directory.mkdir(parents=True, exist_ok=True)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(directory, **kwargs)
    make_tokenizer_files(directory)
    return model


def load_float32(directory: Path):
    """The saved model as transformers loads it, computing in float32 (bf16 weights widened exactly)."""
    import torch
    import transformers as tf

    return tf.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                   attn_implementation="eager").eval()


def hf_logits(model, ids: list[int]) -> np.ndarray:
    """transformers' logits [len(ids), vocab]."""
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def hf_greedy(model, ids: list[int], steps: int) -> list[int]:
    import torch

    out = list(ids)
    with torch.no_grad():
        for _ in range(steps):
            out.append(int(model(torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids):]


FP8_MAX = 448.0
LINEAR_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                   "up_proj.weight", "down_proj.weight")


def _quantize(w, scale_rows: int, scale_cols: int):
    """w [rows, cols] -> (fp8 codes, float32 scales [ceil(rows/br), ceil(cols/bc)], dequantized float32)."""
    import torch

    rows, cols = w.shape
    grid = (-(-rows // scale_rows), -(-cols // scale_cols))
    padded = torch.zeros(grid[0] * scale_rows, grid[1] * scale_cols, dtype=torch.float32)
    padded[:rows, :cols] = w
    blocks = padded.reshape(grid[0], scale_rows, grid[1], scale_cols)
    scales = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    expanded = scales.repeat_interleave(scale_rows, 0).repeat_interleave(scale_cols, 1)[:rows, :cols]
    codes = (w.float() / expanded).to(torch.float8_e4m3fn)
    return codes, scales, codes.float() * expanded


def save_fp8_variant(source: Path, target: Path, layout: str, block: tuple[int, int] = (32, 40),
                     static_input_scales: bool = False, build_reference: bool = True):
    """Copy a saved tiny model with its linear weights in FP8 E4M3: layout "block" (weight_scale_inv on a
    `block` grid; the default 32x40 leaves partial edge blocks), "channel" or "tensor" (weight_scale);
    static_input_scales adds a per-tensor `input_scale` to each (compressed-tensors' static W8A8 scheme).
    Returns the float32 model whose weights are the dequantized FP8 values (the oracle), or None when
    build_reference is False."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    target.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        if f.suffix != ".safetensors" and f.name != "config.json":
            shutil.copy(f, target / f.name)
    tensors = load_file(str(source / "model.safetensors"))
    out, dequantized = {}, {}
    for name, w in tensors.items():
        if not name.endswith(LINEAR_SUFFIXES):
            out[name] = w
            continue
        br, bc = {"block": block, "channel": (1, w.shape[1]), "tensor": w.shape}[layout]
        codes, scales, deq = _quantize(w.float(), br, bc)
        out[name] = codes
        scale_name = name + ("_scale_inv" if layout == "block" else "_scale")
        out[scale_name] = scales.reshape(-1, 1) if layout == "channel" else scales.reshape(()) if layout == "tensor" else scales
        if static_input_scales:  # what a calibration run would store: absmax of the inputs / 448
            out[name.removesuffix("weight") + "input_scale"] = torch.tensor(0.01 * (1 + len(out) % 5))
        dequantized[name] = deq
    save_file(out, str(target / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = ({"quant_method": "fp8", "weight_block_size": list(block)} if layout == "block"
                                     else {"quant_method": "compressed-tensors", "format": "float-quantized"})
    if static_input_scales:
        config["quantization_config"]["activation_scheme"] = "static"
    (target / "config.json").write_text(json.dumps(config))
    if not build_reference:
        return None
    model = load_float32(source)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, deq in dequantized.items():
            params[name].copy_(deq)
    return model


def set_fp8_code(directory: Path, name: str, index: tuple[int, int], code: int) -> None:
    """Overwrites one E4M3 byte of FP8 weight `name` in a saved checkpoint (0x7f / 0xff: a NaN code)."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(directory / "model.safetensors"))
    tensors[name].view(torch.uint8)[index] = code
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def engine_greedy(engine, ids: list[int], steps: int) -> list[int]:
    """`steps` greedy tokens after `ids` through the engine's scheduler (EOS ignored)."""
    from pocketcli.sampling_params import SamplingParams

    seq = engine.add_request(ids, SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return seq.token_ids[len(ids):]
