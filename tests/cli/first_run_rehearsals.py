"""Rehearsals a first run's child process runs in tests/cli/test_first_run.py: importable there by name (the
parent pickles them), three tiny kernels cached in NUMBA_CACHE_DIR."""
import os
import signal

import numba

from pocketcli.errors import UsageError


@numba.njit(cache=True)
def add_one(x):
    return x + 1.0


@numba.njit(cache=True)
def add_two(x):
    return x + 2.0


@numba.njit(cache=True)
def add_three(x):
    return x + 3.0


def compile_three() -> None:
    assert add_three(add_two(add_one(0.0))) == 6.0


def fail_as_bad_input() -> None:
    raise UsageError("model file is not a GGUF")


def interrupt() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends the whole process group


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer sends


def sleep_long() -> None:
    import time

    time.sleep(60)  # a long compile, for a cancel to cut short


@numba.njit(cache=True)
def add_four(x):
    return x + 4.0


def compile_side() -> None:
    """A side child's rehearsal: a kernel of its own, after a moment (the chain's children are at work then)."""
    import time

    time.sleep(0.5)
    assert add_four(0.0) == 4.0


def sleep_briefly() -> None:
    import time

    time.sleep(2)


@numba.njit(cache=True)
def add_five(x):
    return x + 5.0


def compile_tail() -> None:
    """A tail child's rehearsal: a kernel of its own."""
    assert add_five(0.0) == 5.0
