"""Fixtures for the chat tests: a tiny random llama GGUF (loads in well under a second) and a private data dir."""
import pytest

from tests.models.tiny_gguf import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("model") / "tiny-llama.gguf", "llama"))


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    path = tmp_path / "data"
    monkeypatch.setenv("POCKET_DATA_DIR", str(path))
    monkeypatch.setenv("POCKET_CONFIG_DIR", str(tmp_path / "config"))
    return path
