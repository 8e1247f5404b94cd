"""Model architectures, registered in a literal dict so PyInstaller sees them and startup stays fast."""
from __future__ import annotations

from typing import Any

from gguf_loader import GGUFFile, UnsupportedModelError
from gguf_loader.hparams import ModelHParams

from .base import DecoderModel
from .deepseek_v3 import DeepseekV3Model
from .gemma3 import Gemma3Model
from .llama import LlamaModel
from .mimo import MiMoModel
from .qwen2 import Qwen2Model
from .qwen3 import Qwen3Model
from .qwen3_moe import Qwen3MoeModel
from .qwen3_next import Qwen35Model, Qwen3NextModel

MODEL_REGISTRY: dict[str, type[DecoderModel]] = {
    "llama": LlamaModel,
    "qwen2": Qwen2Model,
    "mimo": MiMoModel,
    "qwen3": Qwen3Model,
    "gemma3": Gemma3Model,
    "qwen3moe": Qwen3MoeModel,
    "qwen3next": Qwen3NextModel,
    "qwen35": Qwen35Model,
    "qwen35moe": Qwen35Model,
    "deepseek2": DeepseekV3Model,
}


def model_class_for(arch: str) -> type[DecoderModel]:
    if arch not in MODEL_REGISTRY:
        supported = ", ".join(sorted(MODEL_REGISTRY))
        raise UnsupportedModelError(f"unsupported architecture '{arch}' (supported: {supported})")
    return MODEL_REGISTRY[arch]


def make_model(model_file: GGUFFile, hparams: ModelHParams, ops: Any) -> DecoderModel:
    return model_class_for(hparams.arch)(model_file, hparams, ops)
