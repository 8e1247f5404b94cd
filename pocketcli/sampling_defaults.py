"""A checkpoint's own sampling settings (GGUF `general.sampling.*`; an HF directory's generation_config.json, read
into the same keys by gguf_loader/sampling_keys.py) between the built-in defaults and what the user asks for: an
explicit CLI flag or request field wins, a setting the checkpoint gives comes next, then ours; `--no-model-defaults`
leaves the checkpoint's out. vLLM does the same with generation_config.json, llama.cpp with the GGUF keys."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gguf_loader.sampling_keys import SAMPLING_KEYS, is_number

SAMPLING_FIELDS = tuple(SAMPLING_KEYS)


def model_sampling_defaults(metadata: Mapping[str, Any]) -> dict[str, float | int]:
    """The sampling settings a model file carries, by SamplingParams field name (only those it sets)."""
    return {field: kind(metadata[key]) for field, (key, kind) in SAMPLING_KEYS.items() if is_number(metadata.get(key))}


def resolve_sampling(explicit: Mapping[str, Any], model_defaults: Mapping[str, Any],
                     builtin: Mapping[str, Any]) -> dict[str, Any]:
    """For each field of `builtin`: the explicit value unless it is None, else the model's, else the built-in."""
    return {field: explicit[field] if explicit.get(field) is not None else model_defaults.get(field, value)
            for field, value in builtin.items()}


def describe_defaults(defaults: Mapping[str, Any]) -> str:
    """e.g. "temperature 0.6, top_k 20, top_p 0.95" (for `pocket info`); "" when there are none."""
    return ", ".join(f"{field} {defaults[field]:g}" for field in SAMPLING_FIELDS if field in defaults)
