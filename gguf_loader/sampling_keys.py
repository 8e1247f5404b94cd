"""The GGUF keys of a model's recommended sampling settings (gguf-py's Keys.General.SAMPLING_*), and a Hugging Face
generation_config.json read into them, so that GGUF files and HF directories answer alike.

The key names are written here, not read from gguf-py: importing gguf loads numpy and yaml (0.1 s of
`pocket --help`, whose flags name these fields); tests/gguf/test_sampling_keys.py checks them against gguf.Keys."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# SamplingParams field -> (GGUF key, the field's type)
SAMPLING_KEYS = {
    "temperature": ("general.sampling.temp", float),
    "top_k": ("general.sampling.top_k", int),
    "top_p": ("general.sampling.top_p", float),
    "min_p": ("general.sampling.min_p", float),
    "repeat_penalty": ("general.sampling.penalty_repeat", float),
    "repeat_last_n": ("general.sampling.penalty_last_n", int),
}
# generation_config.json field -> SamplingParams field (the ones vLLM reads; do_sample is ignored, as there)
GENERATION_CONFIG_FIELDS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                            "repetition_penalty": "repeat_penalty"}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def generation_config_metadata(config: Mapping[str, Any]) -> dict[str, float | int]:
    """generation_config.json's sampling fields as GGUF keys. transformers penalises every earlier token of the
    sequence, prompt included: penalty_last_n -1 (the whole context) says so."""
    metadata = {}
    for name, field in GENERATION_CONFIG_FIELDS.items():
        if is_number(config.get(name)):
            key, kind = SAMPLING_KEYS[field]
            metadata[key] = kind(config[name])
    if SAMPLING_KEYS["repeat_penalty"][0] in metadata:
        metadata[SAMPLING_KEYS["repeat_last_n"][0]] = -1
    return metadata
