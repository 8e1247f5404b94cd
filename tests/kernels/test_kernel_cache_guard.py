from kernels_numba.cpu.cache_guard import clear_stale_numba_cache


def test_stale_numba_cache_is_dropped_only_when_a_source_changes(tmp_path):
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
