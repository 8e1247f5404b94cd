import pytest
from numba.core import config

from kernels_numba.cpu.cache_guard import clear_stale_numba_cache


@pytest.fixture
def pycache_locations(monkeypatch):
    """numba's default cache place (each folder's __pycache__), whatever NUMBA_CACHE_DIR the tests run under."""
    monkeypatch.setattr(config, "CACHE_DIR", "")


def test_stale_numba_cache_is_dropped_only_when_a_source_changes(tmp_path, pycache_locations):
    (tmp_path / "kernel.py").write_text("x = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (cache / "kernel.f-1.py311.nbi").write_bytes(b"old")
    clear_stale_numba_cache(tmp_path)  # no stamp yet: unknown sources, drop the cache
    assert not (cache / "kernel.f-1.py311.nbi").exists()

    (cache / "kernel.f-1.py311.nbc").write_bytes(b"fresh")
    clear_stale_numba_cache(tmp_path)  # same sources: keep it
    assert (cache / "kernel.f-1.py311.nbc").exists()

    (tmp_path / "kernel.py").write_text("x = 2\n")
    clear_stale_numba_cache(tmp_path)
    assert not (cache / "kernel.f-1.py311.nbc").exists()


def test_cache_guard_looks_where_numba_writes_with_numba_cache_dir(tmp_path):
    """With NUMBA_CACHE_DIR set, numba caches under its own sub-path: the guard must stamp and look there."""
    import os
    import subprocess
    import sys

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "kern.py").write_text("from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    script = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1])\n"
              "from kernels_numba.cpu.cache_guard import clear_stale_numba_cache, has_compiled_cache\n"
              "package = Path(sys.argv[1]) / 'pkg'\n"
              "clear_stale_numba_cache(package); before = has_compiled_cache(package)\n"
              "sys.path.insert(0, str(package)); import kern; kern.twice(3)\n"
              "print(before, has_compiled_cache(package))\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                            cwd=os.getcwd(), timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]
    assert not (package / "__pycache__").exists() or not list((package / "__pycache__").glob("*.nbi"))


def test_a_source_change_in_a_subfolder_drops_every_folders_cache(tmp_path, pycache_locations):
    """matvec/ and ir/ have their own cache dirs: a change anywhere drops them all, and the top folder's."""
    (tmp_path / "kernel.py").write_text("x = 1\n")
    sub = tmp_path / "matvec"
    sub.mkdir()
    (sub / "leaf.py").write_text("y = 1\n")
    for folder in (tmp_path, sub):
        (folder / "__pycache__").mkdir()
    clear_stale_numba_cache(tmp_path)
    cached = [tmp_path / "__pycache__" / "kernel.f-1.py311.nbi", sub / "__pycache__" / "leaf.g-1.py311.nbc"]
    for path in cached:
        path.write_bytes(b"compiled")
    clear_stale_numba_cache(tmp_path)  # nothing changed: kept
    assert all(path.exists() for path in cached)
    (sub / "leaf.py").write_text("y = 2\n")
    clear_stale_numba_cache(tmp_path)
    assert not any(path.exists() for path in cached)
