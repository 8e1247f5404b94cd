"""`pocket info`: what a model file is (architecture, sizes, quant types, context, chat template)."""
from __future__ import annotations

import argparse
import json

from gguf_loader.hparams import read_hparams

from ..model_source import open_model_file
from ..models import model_class_for
from ..registry import resolve_model
from .common import add_model_argument


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("info", help="describe a model file")
    add_model_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def describe(model_file) -> dict:
    metadata = model_file.metadata
    model_class_for(model_file.architecture)
    vocab_size = model_file.tensor_infos["token_embd.weight"].shape[0]
    hp = read_hparams(metadata, vocab_size)
    num_params = sum(int(_prod(info.shape)) for info in model_file.tensor_infos.values())
    template = metadata.get("tokenizer.chat_template")
    return {
        "path": model_file.path, "name": metadata.get("general.name", ""), "architecture": hp.arch,
        "gguf_version": model_file.version, "file_size_bytes": model_file.file_size, "parameters": num_params,
        "layers": hp.num_layers, "hidden_size": hp.hidden_size, "intermediate_size": hp.intermediate_size,
        "heads": hp.num_heads, "kv_heads": hp.num_kv_heads, "head_dim": hp.head_dim, "vocab_size": vocab_size,
        "context_length": hp.context_length, "rope_theta": hp.rope_theta, "sliding_window": hp.sliding_window,
        "tensor_types": model_file.type_counts(), "tokenizer": metadata.get("tokenizer.ggml.model", ""),
        "chat_template": "from file" if template else f"built-in ({hp.arch})",
        **hf_details(model_file),
    }


def hf_details(model_file) -> dict:
    """Format and quantization of a Hugging Face directory (GGUF files say it with gguf_version / tensor_types)."""
    if getattr(model_file, "format", "gguf") == "gguf":
        return {"format": "gguf"}
    return {"format": model_file.format, "quantization": model_file.quantization_config or "none"}


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def run(args: argparse.Namespace) -> int:
    info = describe(open_model_file(resolve_model(args.model)))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    width = max(len(k) for k in info)
    for key, value in info.items():
        if key == "tensor_types":
            value = ", ".join(f"{t} x{n}" for t, n in sorted(value.items()))
        elif key == "parameters":
            value = f"{value / 1e6:.1f} M"
        elif key == "file_size_bytes":
            value = f"{value / 2**20:.1f} MiB"
        print(f"{key:<{width}}  {value}")
    return 0
