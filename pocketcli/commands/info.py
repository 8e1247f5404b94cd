"""`pocket info`: what a model file is (architecture, sizes, quant types, context, chat template)."""
from __future__ import annotations

import argparse
import json

from ..config import DEFAULT_KV_TYPE
from ..device import DEVICES, describe_device, resolve_device
from ..errors import UsageError
from .common import add_model_argument


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("info", help="describe a model file")
    add_model_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--device", choices=DEVICES, default="auto", help="device to describe (auto: CUDA when usable)")
    p.add_argument("--kv-type", default=DEFAULT_KV_TYPE, metavar="TYPE",
                   help="KV cache type to size: f16 (default), bf16, q8_0, fp8, q4_0 or f32")
    p.add_argument("--memory", default=None, metavar="SIZE",
                   help="memory for the KV cache, e.g. 2G or 512M (default: free RAM or GPU memory less the weights)")
    p.set_defaults(run=run)


def describe(model_file) -> dict:
    from gguf_loader.hparams import read_hparams

    from ..models import model_class_for
    from ..sampling_defaults import model_sampling_defaults

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
        "sampling_defaults": model_sampling_defaults(metadata),
        **hf_details(model_file),
    }


def memory_details(info: dict, device: str, kv_type: str = DEFAULT_KV_TYPE, memory_bytes: int | None = None) -> dict:
    """Where the model would run and what it costs there: weight bytes, KV bytes per token of `kv_type` (and of
    every type), and the tokens of KV cache memory_bytes holds (default: the free RAM, or the GPU's free memory,
    less the weights; the model's own context_length may be smaller)."""
    from ..engine.kv_memory import available_ram_bytes, context_that_fits, kv_table

    device_info = describe_device(device)
    per_type = kv_table(info["layers"], info["kv_heads"], info["head_dim"], None)
    if kv_type not in per_type:
        raise UsageError(f"--kv-type {kv_type} does not fit head_dim {info['head_dim']}; choose one of "
                         f"{', '.join(per_type)}")
    free = device_info.get("gpu_memory_free_bytes", available_ram_bytes())
    memory = memory_bytes if memory_bytes is not None else (free or 0) - info["file_size_bytes"]
    per_token = per_type[kv_type]
    return {**device_info, "weight_bytes": info["file_size_bytes"], "kv_type": kv_type,
            "kv_bytes_per_token": per_token, "kv_bytes_at_context_length": per_token * info["context_length"],
            "kv_bytes_per_token_by_type": per_type, "kv_memory_bytes": max(memory, 0),
            "kv_tokens_that_fit": context_that_fits(max(memory, 0), per_token)}


def hf_details(model_file) -> dict:
    """Format and quantization of a Hugging Face directory (GGUF files say it with gguf_version / tensor_types)."""
    if getattr(model_file, "format", "gguf") == "gguf":
        return {"format": "gguf"}
    details = {"format": model_file.format, "quantization": model_file.quantization_config or "none"}
    fp8 = fp8_details(model_file)
    if fp8:
        details["fp8"] = fp8
    return details


def fp8_details(model_file) -> dict:
    """FP8 E4M3 weights: how many, their scale layouts, their static activation scales (if any)."""
    from gguf_loader.fp8_layout import FP8_STORAGE_TYPE

    layouts: dict[str, int] = {}
    input_scales: list[float] = []
    num_bytes = 0
    for name, info in model_file.tensor_infos.items():
        if info.ggml_type != int(FP8_STORAGE_TYPE):
            continue
        w = model_file.tensor(name)
        if w.fp8 is None:
            continue
        layouts[w.fp8.describe()] = layouts.get(w.fp8.describe(), 0) + 1
        num_bytes += w.nbytes
        if w.fp8.input_scale is not None:
            input_scales.append(w.fp8.input_scale)
    if not layouts:
        return {}
    activations = "dynamic or none: activations stay float32"
    if input_scales:
        activations = (f"static input_scale on {len(input_scales)} weights "
                       f"({min(input_scales):.4g}..{max(input_scales):.4g}), carried, not applied: "
                       "activations stay float32 (weight-only FP8, as transformers on CPU)")
    return {"weights": sum(layouts.values()), "bytes": num_bytes, "scale_layouts": layouts,
            "activations": activations}


def parse_size(text: str | None) -> int | None:
    """'2G', '512M', '64K' or a byte count -> bytes (binary units); None for None."""
    if text is None:
        return None
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    clean = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = units.get(clean[-1:], 1)
    try:
        size = float(clean[:-1] if clean[-1:] in units else clean) * factor
    except ValueError:
        size = -1
    if not size >= 0:
        raise UsageError(f"--memory takes a size like 2G, 512M or a byte count, got {text!r}")
    return int(size)


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def run(args: argparse.Namespace) -> int:
    from kernels_numba.kv_type import kv_type_named

    from ..model_source import open_model_file
    from ..registry import resolve_model
    from ..sampling_defaults import describe_defaults

    info = describe(open_model_file(resolve_model(args.model)))
    kv_type_named(args.kv_type)  # a one-line error naming the choices
    info.update(memory_details(info, resolve_device(args.device), args.kv_type, parse_size(args.memory)))
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
        elif key == "kv_bytes_per_token_by_type":
            value = ", ".join(f"{name} {size / 2**10:.1f} KiB" for name, size in value.items())
        elif "_bytes" in key:
            value = f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 2**10:.1f} KiB"
        elif key == "sampling_defaults":
            value = (f"{describe_defaults(value)} (from the model: flags and request fields win, "
                     "--no-model-defaults ignores them)" if value else "none (built-in defaults)")
        elif key == "fp8":
            layouts = ", ".join(f"{layout} x{n}" for layout, n in sorted(value["scale_layouts"].items()))
            value = (f"{value['weights']} E4M3 weights, {value['bytes'] / 2**20:.1f} MiB at 1 byte each; "
                     f"scales: {layouts}; activations: {value['activations']}")
        print(f"{key:<{width}}  {value}")
    return 0
