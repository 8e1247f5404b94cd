"""numba's cache saves under a lock per index file (pocketcli/cache_save_lock.py), as pocket warmup's workers make
them: a save waits while another process holds its index's lock."""
import threading

import pytest
from numba.core.caching import IndexDataCacheFile

from pocketcli.cache_save_lock import CAN_LOCK, lock_cache_saves, lock_path

pytestmark = pytest.mark.skipif(not CAN_LOCK, reason="no flock here")


def test_save_waits_for_its_index_lock(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setattr(IndexDataCacheFile, "save", IndexDataCacheFile.save)  # restored after the test
    lock_cache_saves()
    lock_cache_saves()  # idempotent: one lock, not two nested
    cache_file = IndexDataCacheFile(str(tmp_path), "kernel-12.py311", "stamp")
    with open(lock_path(cache_file._index_path), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process saving this kernel
        saver = threading.Thread(target=cache_file.save, args=(("sig", "target"), {"code": 1}))
        saver.start()
        saver.join(0.5)
        assert saver.is_alive() and not list(tmp_path.iterdir())
    saver.join(10)
    assert cache_file.load(("sig", "target")) == {"code": 1}
    assert not list(tmp_path.glob("*.lock"))  # the lock lives in the temp dir, not in the cache
