"""A first run compiles its CPU kernels in child processes, one after another, before this process imports numba.

LLVM keeps ~1.9 MB of native memory for every kernel it compiles, for as long as the process lives: a first
`pocket generate` compiled ~160 kernels on top of the weights and peaked at 723 MB, where a warm run peaks at
~440 MB. So when the model's kernels are not cached yet (first_run_stamp.py), the command first rehearses its
request up to the first token (commands/generate.py: rehearse) in a child process, which compiles into numba's
cache and exits, its LLVM memory with it. A child stops itself at the start of a compile once it has compiled
COMPILES_PER_CHILD kernels, and the next loads those from the cache and compiles on, so no child holds the weights
and many kernels' LLVM memory at once. Then this process runs as a warm one would up to its first token, and
compiles only the decode step's kernels itself (~50 for Gemma 3 270M: rehearsing them too would hold the first
token back by their ~30 s). While the children work, this process holds argparse and the registry (~25 MB).

The children show the compile progress line on stderr, its count carried from one to the next. Ctrl-C ends them
at once (exit 130, "interrupted"); a failing child's one-line error ends the command with its exit code; a cache
that keeps nothing the children compile ends the chain after MAX_CHILDREN, and this process compiles the rest.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

# Gemma 3 270M's first token: 131 compiles in two children peaking at 352 and 538 MB (the second holds the weights)
COMPILES_PER_CHILD = 75
MAX_CHILDREN = 8
CUT_EXIT = 75  # a child that stopped itself after COMPILES_PER_CHILD: the next one goes on
EXIT_INTERRUPTED = 130
DISABLE_ENV = "POCKET_FIRST_RUN_CHILDREN"  # "0": compile in this process, as a warm-cache run would
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
CHILD_CODE = (f"import sys; sys.path.insert(0, {PACKAGE_ROOT!r}); "  # this checkout's pocketcli, wherever the cwd is
              "from pocketcli.commands.first_run import child_main; child_main()")


def compile_first_run_kernels(args, model_path: str, rehearsal: Callable[[], None]) -> int:
    """On a first run (this model's kernels not cached), run `rehearsal` in child processes until it completes;
    0 then (or on a warm cache, at once), else the exit code the command ends with (a child's error is shown)."""
    stamp = cold_stamp(args, model_path)
    return 0 if stamp is None else run_children(rehearsal, stamp)


def run_children(rehearsal: Callable[[], None], stamp: Path, compiles_per_child: int = COMPILES_PER_CHILD) -> int:
    """Children, one after another, until one completes the rehearsal: then the stamp is left."""
    print("first run: compiling the CPU kernels this model needs, in helper processes (about a minute; later "
          "runs load them)", file=sys.stderr, flush=True)
    progress = (0, 0.0)
    for _ in range(MAX_CHILDREN):
        code, progress = run_child(rehearsal, progress, compiles_per_child)
        if code == 0:
            from ..first_run_stamp import write_stamp

            write_stamp(stamp)
            return 0
        if code != CUT_EXIT:
            return child_failure(code)
    return 0  # the cache keeps nothing: the rest compiles in this process


def cold_stamp(args, model_path: str) -> Path | None:
    """The first-run mark to leave when the command's kernels are not cached yet; None on a warm cache, in the
    binary (it ships its kernels), for CUDA and when children are switched off or could not leave the mark."""
    if getattr(sys, "frozen", False) or os.environ.get(DISABLE_ENV) == "0":
        return None
    from ..first_run_stamp import can_write_stamp, stamp_path

    stamp = stamp_path(model_path)
    if stamp is None or stamp.exists():  # the warm path ends here (~3 ms)
        return None
    from .common import kernel_backend

    if kernel_backend(args) != "cpu" or not can_write_stamp(stamp):
        return None
    check_model_opens(model_path)
    return stamp


def check_model_opens(model_path: str) -> None:
    """Read the model's header (GGUF metadata and tensor table, or a checkpoint's config) before any child starts:
    a corrupt or truncated file then ends the command with its one-line error at once, not after a first-run
    notice or the kernels' compiling."""
    from ..model_source import open_model_file

    open_model_file(model_path)


def run_child(rehearsal: Callable[[], None], progress: tuple[int, float],
              compiles_per_child: int) -> tuple[int, tuple[int, float]]:
    """One child's exit code and the compile progress so far (kernels, seconds), which the next goes on from."""
    child = subprocess.Popen([sys.executable, "-c", CHILD_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        with child.stdout:
            try:
                child.stdin.write(pickle.dumps((rehearsal, progress, compiles_per_child)))
                child.stdin.close()
            except BrokenPipeError:  # it ended before reading: its exit code says why
                pass
            report = child.stdout.read().split()
        code = child.wait()
    except KeyboardInterrupt:
        stop(child)
        raise
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    return code, (int(report[0]), float(report[1])) if len(report) == 2 else progress


def stop(child: subprocess.Popen) -> None:
    """Ctrl-C reached the child too (same process group); a SIGINT sent to this process alone is passed on."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def child_failure(code: int) -> int:
    """A child that printed its error exits 1 or 2; one killed by a signal (out of memory) printed nothing."""
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        print(f"error: the process compiling the kernels was killed ({name})", file=sys.stderr)
        return 1
    return code


# --- the child ---------------------------------------------------------------------------------------------
def child_main() -> None:
    """Runs the rehearsal the parent sent on stdin, showing compile progress; exits 0 when it completed,
    CUT_EXIT when it stopped itself, 130 at Ctrl-C, 2 or 1 with a one-line error."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(EXIT_INTERRUPTED))  # no unwinding through a compile
    from ..compile_progress_line import report_compiles_to_stderr
    from ..errors import USER_ERRORS

    try:
        rehearsal, progress, compiles_per_child = pickle.load(sys.stdin.buffer)
        # one burst for the whole child: a pause (the weights' regrouping) does not end the count
        with report_compiles_to_stderr(progress_before=progress, quiet_s=float("inf")) as watch, \
                stop_after_compiles(watch, compiles_per_child):
            rehearsal()
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:
        print(f"error: compiling the kernels failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    sys.exit(0)


@contextmanager
def stop_after_compiles(watch, limit: int):
    """Ends the process at the start of a top-level compile once `limit` cached kernels compiled in it: every
    earlier compile has been saved to the cache by then (numba saves after the compile event ends)."""
    from kernels_numba.compile_events import listen_to_compiles

    compiled = cached = 0

    def on_event(event) -> None:
        nonlocal compiled, cached
        if not event.is_start:
            compiled += not event.is_failed
            cached += not event.is_failed and event.is_cached
        elif compiled >= limit and cached:  # a child that cached nothing would leave the next one no further
            total, elapsed_s = watch.progress_so_far()
            print(total, f"{elapsed_s:.3f}", flush=True)
            sys.stderr.flush()
            os._exit(CUT_EXIT)

    with listen_to_compiles(on_event):
        yield
