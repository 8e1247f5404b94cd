"""The model registry (models.toml): names -> where the GGUF file comes from."""
from __future__ import annotations

import importlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gguf_loader import ModelFileError

BUNDLED_REGISTRY = Path(__file__).with_name("models.toml")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    source: str
    description: str = ""
    package: str = ""
    module: str = ""
    path: str = ""
    arch: str = ""
    quant: str = ""
    ctx_size: int = 0

    def resolve_path(self) -> str:
        if self.source == "path":
            return os.path.expanduser(self.path)
        if self.source == "pypi":
            return self._assemble_from_package()
        raise ModelFileError(f"model '{self.name}': unknown source '{self.source}' in models.toml")

    def _assemble_from_package(self) -> str:
        try:
            module = importlib.import_module(self.module)
        except ImportError:
            raise ModelFileError(f"model '{self.name}' needs the Python package '{self.package}' "
                                 f"(pip install {self.package})") from None
        return str(module.assemble())


@dataclass(frozen=True)
class Registry:
    default: str
    models: dict[str, ModelEntry]

    def get(self, name: str) -> ModelEntry:
        if name not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            raise ModelFileError(f"unknown model '{name}' (not a file, and not in models.toml: {known})")
        return self.models[name]


def registry_path() -> Path:
    return Path(os.environ.get("POCKET_MODELS_TOML", BUNDLED_REGISTRY))


def load_registry(path: Path | None = None) -> Registry:
    path = path or registry_path()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelFileError(f"cannot read model registry {path}: {exc}") from None
    fields = set(ModelEntry.__dataclass_fields__)
    models = {name: ModelEntry(name=name, **{k: v for k, v in entry.items() if k in fields})
              for name, entry in data.get("models", {}).items()}
    return Registry(default=data.get("default", ""), models=models)


def resolve_model(name_or_path: str | None) -> str:
    """A path to a GGUF file from a file path, a registry name, or None (the default model)."""
    if name_or_path and (os.path.sep in name_or_path or name_or_path.endswith(".gguf")
                         or os.path.exists(name_or_path)):
        return name_or_path
    registry = load_registry()
    return registry.get(name_or_path or registry.default).resolve_path()
