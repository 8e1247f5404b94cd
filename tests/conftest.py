"""One OpenBLAS thread, as the `pocket` command sets it (pocketcli/__init__.py): numpy may load OpenBLAS before
pocketcli is imported, and on a busy 2-core machine a multi-threaded OpenBLAS pool makes the tiny matmuls of
these tests ~50x slower (measured: 7 ms vs 0.13 ms for a [100, 64] x [64, 128] product). The root conftest loads
before any test module imports numpy, so the whole suite runs the engine's production threading."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# `pocket` commands run in-process keep regrouped weights in the user cache dir (run_layout_store.py): not from
# tests, whose model files are temporary (the store's own tests point it at a temporary folder)
os.environ.setdefault("POCKET_RUN_LAYOUT_CACHE_MB", "0")
# a first run of a model compiles in child processes (pocketcli/commands/first_run.py): seconds per new model
# file, which tests make by the dozen; tests/cli/test_first_run.py and test_warmup.py switch it back on
os.environ.setdefault("POCKET_FIRST_RUN_CHILDREN", "0")

# numba's CPU name and features come from the CPU tier (kernels_numba/cpu_tier.py), set when kernels_numba is
# imported: before any test module can compile with numba
import kernels_numba  # noqa: E402,F401

# the README's test line runs the suite in two pytest-xdist workers: two processes saving compiles of one kernel
# into numba's cache could otherwise leave an index naming the other's code (pocketcli/cache_save_lock.py)
from pocketcli.cache_save_lock import lock_cache_saves  # noqa: E402

lock_cache_saves()

# Ctrl-C as a terminal delivers it: a suite started in the background (`cmd &` in a script) inherits SIGINT ignored,
# and so would every `pocket` process the tests start (an ignored signal survives exec, a handler does not); the
# tests that send SIGINT (tests/parallel/test_tp_cli.py, tests/binary/test_frozen_binary.py) would then see exit 0
# where a user's Ctrl-C gives 130
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
