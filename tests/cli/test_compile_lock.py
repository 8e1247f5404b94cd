"""A kernel compiles in one process at a time (pocketcli/compile_lock.py): a process whose cache miss meets another
process's compile of the same kernel waits for it and loads it from numba's cache instead of compiling it too."""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pocketcli.compile_lock import CAN_LOCK

pytestmark = pytest.mark.skipif(not CAN_LOCK, reason="no record locks here")
ROOT = Path(__file__).resolve().parents[2]

KERNELS = '''
from numba import njit


@njit(cache=True)
def add_one(x):
    return x + 1


@njit(cache=True)
def add_two(x):
    return add_one(x) + 1


@njit(cache=True)
def broken(x):
    return x.no_such_attribute
'''

# one process: share_compiles (or not), optionally a slow compile, then add_two(1); prints what it saw as JSON
WORKER = textwrap.dedent('''
    import json, sys, time
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    share, slow_s = sys.argv[3] == "1", float(sys.argv[4])
    import numba.core.event as event
    from numba.core import dispatcher

    compiled = []

    class Recorder(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__name__)

    event.register("numba:compile", Recorder())
    if share:
        from pocketcli.compile_lock import share_compiles
        share_compiles()
    if slow_s:
        compile_types = dispatcher._FunctionCompiler.compile

        def slow_compile(self, args, return_type):
            if self.py_func.__name__ == "add_two":
                time.sleep(slow_s)  # after the cache miss, inside the compile: its lock is held
            return compile_types(self, args, return_type)

        dispatcher._FunctionCompiler.compile = slow_compile
    import kernels
    started = time.time()
    result = kernels.add_two(1)
    print(json.dumps({"result": result, "compiled": compiled, "started": started, "ended": time.time()}))
''')


def start_worker(tmp_path: Path, cache_dir: Path, share: bool, slow_s: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    return subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(ROOT), "1" if share else "0",
                             str(slow_s)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report(worker: subprocess.Popen) -> dict:
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def kernels_dir(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    return tmp_path


@pytest.mark.parametrize("share", [True, False])
def test_a_compile_under_way_elsewhere_is_waited_for_and_loaded(kernels_dir, share):
    """The first process compiles add_two slowly (3 s inside its compile); the second, started meanwhile, waits
    for it and loads both kernels from the cache (no compile of its own), where without the lock it compiles them
    itself."""
    cache_dir = kernels_dir / "cache"
    first = start_worker(kernels_dir, cache_dir, share=True, slow_s=3.0)
    time.sleep(1.5)  # its imports done, its slow compile under way
    second = start_worker(kernels_dir, cache_dir, share=share)
    first_seen, second_seen = report(first), report(second)
    assert first_seen["result"] == second_seen["result"] == 3
    if share:
        assert sorted(first_seen["compiled"]) == ["add_one", "add_two"]
        assert second_seen["compiled"] == []
        assert second_seen["ended"] >= first_seen["ended"] - 0.5  # it waited for the first one's save
    else:  # both compile add_two (the second may also save add_one before the first reaches it)
        assert "add_two" in first_seen["compiled"]
        assert sorted(second_seen["compiled"]) == ["add_one", "add_two"]


def test_a_failed_compile_lets_the_lock_go(kernels_dir):
    """A compile that fails (a typing error) drops its lock: another process compiles that kernel at once."""
    code = textwrap.dedent(f'''
        import sys
        sys.path[:0] = [{str(kernels_dir)!r}, {str(ROOT)!r}]
        from pocketcli import compile_lock
        compile_lock.share_compiles()
        compile_lock.share_compiles()  # idempotent
        import kernels
        try:
            kernels.broken(1)
        except Exception as exc:
            print(type(exc).__name__)
        assert not compile_lock._held, compile_lock._held
        assert kernels.add_two(1) == 3 and not compile_lock._held  # saved: released
        print("ok")
    ''')
    env = {**os.environ, "NUMBA_CACHE_DIR": str(kernels_dir / "cache")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["TypingError", "ok"]
