"""The GGUF keys of a model's recommended sampling settings (gguf-py's Keys.General.SAMPLING_*), and a Hugging Face
generation_config.json read into them, so that GGUF files and HF directories answer alike."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gguf import Keys

# SamplingParams field -> (GGUF key, the field's type)
SAMPLING_KEYS = {
    "temperature": (Keys.General.SAMPLING_TEMP, float),
    "top_k": (Keys.General.SAMPLING_TOP_K, int),
    "top_p": (Keys.General.SAMPLING_TOP_P, float),
    "min_p": (Keys.General.SAMPLING_MIN_P, float),
    "repeat_penalty": (Keys.General.SAMPLING_PENALTY_REPEAT, float),
    "repeat_last_n": (Keys.General.SAMPLING_PENALTY_LAST_N, int),
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
    if Keys.General.SAMPLING_PENALTY_REPEAT in metadata:
        metadata[Keys.General.SAMPLING_PENALTY_LAST_N] = -1
    return metadata
