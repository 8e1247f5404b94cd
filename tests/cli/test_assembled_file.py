"""A model package's GGUF is checked by its own assemble() once; later runs trust the stamp while the file is as
stamped, and go through assemble() again when it changed."""
import os
import sys
import types

import pytest

from pocketcli.assembled_file import assembled_path


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A stand-in model package whose assemble() counts its calls and returns a real file."""
    monkeypatch.setenv("POCKET_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    module = types.ModuleType("stand_in_model_package")
    module.calls = 0

    def assemble():
        module.calls += 1
        return gguf

    module.assemble = assemble
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module, gguf


def test_second_run_skips_the_package_check(package):
    module, gguf = package
    assert assembled_path(module.__name__) == str(gguf)
    assert assembled_path(module.__name__) == str(gguf)
    assert module.calls == 1


def test_a_changed_file_is_checked_again(package):
    module, gguf = package
    assembled_path(module.__name__)
    gguf.write_bytes(b"GGUF" + bytes(10))  # truncated
    assert assembled_path(module.__name__) == str(gguf)
    assert module.calls == 2


def test_a_touched_file_is_checked_again(package):
    module, gguf = package
    assembled_path(module.__name__)
    status = gguf.stat()
    os.utime(gguf, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
    assembled_path(module.__name__)
    assert module.calls == 2


def test_a_missing_package_is_an_import_error(tmp_path, monkeypatch):
    monkeypatch.setenv("POCKET_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ImportError):
        assembled_path("no_such_model_package_here")
