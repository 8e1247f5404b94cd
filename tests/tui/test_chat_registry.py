"""The user's models.toml overrides the bundled registry; `pocket list` and `pocket rm`."""
import json

import pytest

from gguf_loader import ModelFileError
from pocketcli.cli import main
from pocketcli.registry import load_registry, parse_hf_reference, resolve_model

USER_TOML = """
default = "tiny"

[models.tiny]
source = "path"
path = "{tiny}"

[models.remote]
source = "hf"
repo = "someone/tiny-GGUF"
file = "tiny-q8_0.gguf"
"""


@pytest.fixture
def user_registry(tiny_model, data_dir, tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.mkdir()
    (config / "models.toml").write_text(USER_TOML.format(tiny=tiny_model))
    monkeypatch.setenv("POCKET_MODELS_DIR", str(tmp_path / "models"))
    return tmp_path / "models"


def test_user_registry_overrides_bundled(user_registry, tiny_model):
    registry = load_registry()
    assert registry.default == "tiny" and "gemma3-270m" in registry.models
    assert resolve_model(None) == tiny_model
    with pytest.raises(ModelFileError, match="pocket pull remote"):
        resolve_model("remote")
    assert parse_hf_reference("hf:a/b/c.gguf").local_path() == user_registry / "a/b/c.gguf"


def test_list_and_rm(user_registry, tiny_model, capsys):
    assert main(["list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["tiny"]["installed"] and rows["tiny"]["default"] and rows["tiny"]["size_bytes"] > 0
    assert rows["remote"] == {"name": "remote", "source": "hf:someone/tiny-GGUF/tiny-q8_0.gguf",
                              "size_bytes": None, "installed": False, "default": False,
                              "chat_default": False}
    downloaded = user_registry / "someone/tiny-GGUF/tiny-q8_0.gguf"
    downloaded.parent.mkdir(parents=True)
    downloaded.write_bytes(b"GGUF")
    assert resolve_model("remote") == str(downloaded)
    assert main(["rm", "remote"]) == 0 and not downloaded.exists()
    assert main(["rm", "tiny"]) == 2  # a user's own file is never deleted
    assert "does not delete" in capsys.readouterr().err
