"""A first run compiles its CPU kernels in child processes, one after another, before this process imports numba.

LLVM keeps ~1.9 MB of native memory for every kernel it compiles, for as long as the process lives: a first
`pocket generate` compiled ~160 kernels on top of the weights and peaked at 723 MB, where a warm run peaks at
~440 MB. So when the model's kernels are not cached yet (first_run_stamp.py), the command first rehearses its
request up to the first token (commands/generate.py: rehearse) in a child process, which compiles into numba's
cache and exits, its LLVM memory with it. A child stops itself at the start of a compile once it has compiled
COMPILES_PER_CHILD kernels, and the next loads those from the cache and compiles on, so no child holds the weights
and many kernels' LLVM memory at once. Then this process runs as a warm one would up to its first token. The
decode step's kernels (~60 for Gemma 3 270M) compile in a side child beside the chain (below), or where it cannot
run, in this process after its first token: rehearsing them in the chain too would hold the first token back by
their ~20 s. While the children work, this process holds argparse and the registry (~25 MB).

The children show the compile progress line on stderr, its count carried from one to the next. Ctrl-C ends them
at once (exit 130, "interrupted"); a failing child's one-line error ends the command with its exit code; a cache
that keeps nothing the children compile ends the chain after MAX_CHILDREN, and this process compiles the rest.

The chat app runs the children from its engine thread while its screen is up (ChildChain with on_progress): the
children then send their progress to this process as lines on their stdout, for its status bar, and their stderr
(an error's one line) comes back as a FirstRunFailed; closing the app kills the child at work. The chat's side
child (below) compiles its decode step from the weights' types there too, and in `chat --plain`; so does `pocket
serve`'s (its chain rehearses the load and warm-up on all threads: the server loads after the side child).

Where a second core is free, a side child compiles the decode step's kernels at the same time (a command's
`side_rehearsal`: generate's, below): they no longer wait for the chain, which compiles one kernel after another
on one core, nor for the first token. The side child is quiet (its compiles are not on the progress line) and not
cut (where it rehearses a decode, it holds the weights and its ~150 compiles at once: 626 MB for Gemma 3 270M). If
it fails, the command compiles what it left (an error of the command's own shows there, in one line). The
command's first decode step waits for it (hold_decode_for_side_child, at most SIDE_CHILD_GRACE_S, then it is
stopped; what it saved stays cached); its first token does not. Children lock each cache save
(cache_save_lock.py): two of them may save compiles of one function at once. `pocket generate`, Gemma 3 270M,
AVX2 tier, 2-core Intel Xeon (bench/cold_start.py): first token 33.5 -> 27.4 s, the whole run 50.5 -> 35.2 s.

On a slower CPU the side child is the critical path: on a 2-vCPU AMD EPYC Zen 3 (AVX2 native) the chain takes ~30
s and the side child ~50 s (it loads the model too, and decode_layer_into's compile alone is ~45 s from an empty
cache), so the first decode step waited ~20 s. When the chain completes with the side child still at work, a tail
child (a command's `tail_rehearsal`) takes the core the chain leaves for the kernels the side child would compile
last, which it then finds cached; hold_decode_for_side_child waits for both. generate's side and tail children
compile the fused decode step from the weights' types (engine/decode_step_ahead.py) without loading the model:
the side child starts with the kernels the chain needs last (the attention's, the later layers' leaves) and the
chain finds them cached, while the load's kernels, which both children compiled at the same moment, are the
chain's alone; the tail child compiles at once. Gemma 3 270M on that Zen 3: the largest process's peak 563 ->
414 MB, the tree's 1110-1115 -> ~960 MB.
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

# Gemma 3 270M's first token: 131 compiles in two children peaking at 352 and 538 MB (the second holds the weights)
COMPILES_PER_CHILD = 75
MAX_CHILDREN = 8
CUT_EXIT = 75  # a child that stopped itself after COMPILES_PER_CHILD: the next one goes on
SIDE_CHILD_GRACE_S = 60.0  # how long the first decode step waits for the side child before stopping it
SIDE_CHILD_MAX_COMPILES = 10**9  # no cut
# a side (or tail) child yields a shared core to the chain and the command: the tail child starts as the command
# loads the model and runs the prompt, three processes on two cores
SIDE_CHILD_NICENESS = 10
MIN_SIDE_CHILD_CORES = 2  # cores this process may run on for a side child to start beside the chain
EXIT_INTERRUPTED = 130
DISABLE_ENV = "POCKET_FIRST_RUN_CHILDREN"  # "0": compile in this process, as a warm-cache run would
_side_children: list[subprocess.Popen] = []  # this process's side (and tail) children, at work after the chain
_side_child_wait_s = 0.0  # how long this process has waited for them (end_side_child)
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
CHILD_CODE = (f"import sys; sys.path.insert(0, {PACKAGE_ROOT!r}); "  # this checkout's pocketcli, wherever the cwd is
              "from pocketcli.commands.first_run import child_main; child_main()")


def compile_first_run_kernels(args, model_path: str, rehearsal: Callable[[], None],
                              side_rehearsal: Callable[[], None] | None = None,
                              tail_rehearsal: Callable[[], None] | None = None) -> int:
    """On a first run (this model's kernels not cached), run `rehearsal` in child processes until it completes,
    and `side_rehearsal` (the decode step's kernels) in a side child beside them where a core is free, then
    `tail_rehearsal` beside the side child if it is still at work; 0 then (or on a warm cache, at once), else the
    exit code the command ends with (a child's error is shown)."""
    stamp = cold_stamp(args, model_path)
    return 0 if stamp is None else run_children(rehearsal, stamp, side_rehearsal=side_rehearsal,
                                                tail_rehearsal=tail_rehearsal)


def run_children(rehearsal: Callable[[], None], stamp: Path, compiles_per_child: int = COMPILES_PER_CHILD,
                 side_rehearsal: Callable[[], None] | None = None,
                 tail_rehearsal: Callable[[], None] | None = None) -> int:
    """Children, one after another, until one completes the rehearsal: then the stamp is left. A side child runs
    side_rehearsal meanwhile (start_side_child), and once the chain has completed goes on for the command's first
    decode step to wait for (hold_decode_for_side_child); it is stopped at once if the chain fails. Where it is
    still at work when the chain completes, a tail child runs tail_rehearsal on the core the chain leaves: the
    kernels the side child would compile last, so that it finds them cached."""
    global _side_children
    print("first run: compiling the CPU kernels this model needs, in helper processes (about a minute; later "
          "runs load them)", file=sys.stderr, flush=True)
    side = start_side_child(side_rehearsal)
    try:
        code = _run_chain(rehearsal, stamp, compiles_per_child)
    except BaseException:
        stop(side)
        raise
    if code != 0 or side is None:
        stop(side)
        return code
    from ..cache_save_lock import lock_cache_saves
    from ..compile_lock import share_compiles

    lock_cache_saves()  # what this process compiles is saved while the side child may save too
    share_compiles()
    tail = start_side_child(tail_rehearsal) if side.poll() is None else None
    _side_children = [child for child in (side, tail) if child is not None]
    atexit.register(end_side_child, 0.0)  # a command that ends before its decode leaves no child behind
    return 0


def _run_chain(rehearsal: Callable[[], None], stamp: Path, compiles_per_child: int) -> int:
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


def usable_cores() -> int:
    """Cores this process may run on (its affinity where the OS tells, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def start_side_child(side_rehearsal: Callable[[], None] | None) -> subprocess.Popen | None:
    """A quiet child running side_rehearsal beside the chain, or None (no side rehearsal, or a single core: the two
    would take turns on it and the first token would come later). It is not cut after COMPILES_PER_CHILD: the
    decode step's kernels are what it is for, and a cut one would leave them to the command."""
    if side_rehearsal is None or usable_cores() < MIN_SIDE_CHILD_CORES:
        return None
    child = subprocess.Popen([sys.executable, "-c", CHILD_CODE], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    send_job(child, (side_rehearsal, (0, 0.0), SIDE_CHILD_MAX_COMPILES, SIDE))
    return child


def rehearse_decode_step(config) -> bool:
    """A side rehearsal (chat, serve, bench): the fused decode step's kernels of config's model (an EngineConfig)
    from the weights' types (engine/decode_step_ahead.py), beside the chain that rehearses the load. Without it
    serve's chain compiled them too, one kernel after another on one core while the other idled (SmolLM2-135M-Instruct
    on a 2-vCPU AMD EPYC Zen 3, AVX2: 164 kernels in 56.4 s). These commands take no tail child (generate's): their
    chains rehearse a decode step, so they complete only once the side child has saved its kernels (they wait for its
    compiles, compile_lock.py), and a tail child then started compiled its part again (the chat app's first reply
    41.6-41.7 s -> 42.6-44.8 s). Whether it compiled the step (compile_decode_step_ahead)."""
    from ..engine.decode_step_ahead import compile_decode_step_ahead, defer_row_codecs

    defer_row_codecs()
    return compile_decode_step_ahead(config)


def end_side_child(grace_s: float = SIDE_CHILD_GRACE_S) -> None:
    """Wait up to grace_s (for all of them) for this process's side children to finish, then stop those still at
    work (what they saved stays cached)."""
    global _side_children, _side_child_wait_s
    children, _side_children = _side_children, []
    if not children:
        return
    started = time.perf_counter()
    try:
        for child in children:
            try:
                child.wait(timeout=max(0.0, grace_s - (time.perf_counter() - started)))
            except subprocess.TimeoutExpired:
                stop(child)
    except KeyboardInterrupt:
        for child in children:
            stop(child)
        raise
    finally:
        _side_child_wait_s += time.perf_counter() - started


def side_child_wait_seconds() -> float:
    """Seconds this process has waited for its side children: kernel compiling that a command's timings include
    (generate's first decode step waits for them)."""
    return _side_child_wait_s


def hold_decode_for_side_child(engine) -> None:
    """The engine's first step with a decode in it (a running sequence with a token out already) first waits for
    the side child (end_side_child): it is saving that step's kernels, which this process would otherwise compile
    again beside it. The steps up to the first token do not wait. Nothing to do without a side child at work."""
    if not _side_children:
        return
    step = engine.step

    def step_after_side_child():
        if any(seq.num_completion_tokens for seq in engine.scheduler.running):
            end_side_child()
            engine.step = step  # as it was
        return step()

    engine.step = step_after_side_child


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
            send_job(child, (rehearsal, progress, compiles_per_child, False))
            lines = child.stdout.read().decode(errors="replace").splitlines()
        code = child.wait()
    except KeyboardInterrupt:
        stop(child)
        raise
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    return code, cut_progress(lines, progress)


def send_job(child: subprocess.Popen, job: tuple) -> None:
    try:
        child.stdin.write(pickle.dumps(job))
        child.stdin.close()
    except BrokenPipeError:  # it ended before reading: its exit code says why
        pass


def cut_progress(lines: list[str], progress: tuple[int, float]) -> tuple[int, float]:
    """The count a child that stopped itself reported ("cut KERNELS SECONDS"), else the count it started from."""
    for line in reversed(lines):
        words = line.split()
        if len(words) == 3 and words[0] == "cut":
            return int(words[1]), float(words[2])
    return progress


class FirstRunFailed(Exception):
    """A child of ChildChain failed: its one-line error (without "error: "), or how it was killed."""


class ChildChain:
    """A first run's children for a caller that shows their progress itself (the chat app's status bar): each
    child's progress comes to on_progress (a CompileProgress, on the calling thread) and its stderr is kept, not
    shown; cancel() (from any thread) kills the child at work (and the side child) and ends run() with
    FirstRunFailed.

    run()'s side_rehearsal (the chat's: the fused decode step compiled from the weights' types) runs in a quiet side
    child beside the chain where a second core is free: the chain, which rehearses a decode too, then finds those
    kernels cached or waits for the side child's compile of them (compile_lock.py). `pocket chat --plain`'s first
    reply, SmolLM2-135M on a 2-vCPU AMD EPYC Zen 3 (AVX2), empty cache: the chain alone compiled 188 kernels on one
    core while the other idled (the reply at 56.4 s)."""

    def __init__(self, on_progress: Callable, compiles_per_child: int = COMPILES_PER_CHILD):
        self.on_progress = on_progress
        self.compiles_per_child = compiles_per_child
        self.lock = threading.Lock()
        self.child: subprocess.Popen | None = None
        self.side: subprocess.Popen | None = None
        self.is_cancelled = False

    def run(self, rehearsal: Callable[[], None], stamp: Path,
            side_rehearsal: Callable[[], None] | None = None) -> None:
        """The chain until one child completes rehearsal (then the stamp is left); the side child, if any, gets
        SIDE_CHILD_GRACE_S after that to finish (what it saved stays cached), and is stopped at once if the chain
        fails or is cancelled."""
        with self.lock:
            if self.is_cancelled:
                raise FirstRunFailed("cancelled")
            self.side = start_side_child(side_rehearsal)
        is_complete = False
        try:
            is_complete = self._run_chain(rehearsal, stamp)
        finally:
            self._end_side(SIDE_CHILD_GRACE_S if is_complete else 0.0)

    def _run_chain(self, rehearsal: Callable[[], None], stamp: Path) -> bool:
        progress = (0, 0.0)
        for _ in range(MAX_CHILDREN):
            code, progress = self.run_child(rehearsal, progress)
            if code == 0:
                from ..first_run_stamp import write_stamp

                write_stamp(stamp)
                return True
            if code != CUT_EXIT:
                return False
        return False  # the cache keeps nothing: the rest compiles in this process

    def _end_side(self, grace_s: float) -> None:
        side, self.side = self.side, None
        if side is None:
            return
        try:
            side.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        stop(side)

    def cancel(self) -> None:
        with self.lock:
            self.is_cancelled = True
            for child in (self.child, self.side):
                if child is not None and child.poll() is None:
                    child.kill()

    def run_child(self, rehearsal: Callable[[], None], progress: tuple[int, float]) -> tuple[int, tuple[int, float]]:
        with self.lock:
            if self.is_cancelled:
                raise FirstRunFailed("cancelled")
            self.child = child = subprocess.Popen([sys.executable, "-c", CHILD_CODE], stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        errors: list[bytes] = []
        reader = threading.Thread(target=lambda: errors.append(child.stderr.read()), daemon=True)
        reader.start()
        lines: list[str] = []
        with child.stdout:
            send_job(child, (rehearsal, progress, self.compiles_per_child, True))
            for raw in child.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                lines.append(line)
                self.report(line)
        code = child.wait()
        reader.join()
        if self.is_cancelled:
            raise FirstRunFailed("cancelled")
        if code not in (0, CUT_EXIT):
            raise FirstRunFailed(failure_message(code, b"".join(errors).decode(errors="replace")))
        return code, cut_progress(lines, progress)

    def report(self, line: str) -> None:
        """A child's progress line: "progress KERNELS SECONDS IS_CACHED IS_DONE KERNEL"."""
        from ..compile_progress import CompileProgress

        words = line.split(maxsplit=5)
        if len(words) == 6 and words[0] == "progress":
            self.on_progress(CompileProgress(words[5], int(words[1]), words[3] == "1", float(words[2]),
                                             is_done=words[4] == "1"))


def failure_message(code: int, stderr: str) -> str:
    """What ended a child, in one line: its own error line (without "error: "), or the signal that killed it."""
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return f"the process compiling the kernels was killed ({name})"
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    return errors[-1].removeprefix("error: ") if errors else f"the process compiling the kernels exited with {code}"


def stop(child: subprocess.Popen | None) -> None:
    """Ctrl-C reached the child too (same process group); a SIGINT sent to this process alone is passed on. Also
    how a side child past its time, or beside a chain that ended early, is stopped (None: no side child)."""
    if child is None:
        return
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
        print(f"error: {failure_message(code, '')}", file=sys.stderr)
        return 1
    return code


# --- the child ---------------------------------------------------------------------------------------------
def child_main() -> None:
    """Runs the rehearsal the parent sent on stdin, showing compile progress; exits 0 when it completed,
    CUT_EXIT when it stopped itself, 130 at Ctrl-C, 2 or 1 with a one-line error."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(EXIT_INTERRUPTED))  # no unwinding through a compile
    from ..errors import USER_ERRORS

    from ..cache_save_lock import lock_cache_saves
    from ..compile_lock import share_compiles

    lock_cache_saves()  # a side child may save compiles of the same functions at the same time
    share_compiles()  # and compile one of them while the chain does: one waits for the other's
    try:
        rehearsal, progress, compiles_per_child, to_parent = pickle.load(sys.stdin.buffer)
        if to_parent == SIDE and hasattr(os, "nice"):
            os.nice(SIDE_CHILD_NICENESS)  # the first token's processes first, where they share a core
        # one burst for the whole child: a pause (the weights' regrouping) does not end the count
        with progress_reporter(to_parent, progress) as watch, stop_after_compiles(watch, compiles_per_child):
            rehearsal()
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:
        print(f"error: compiling the kernels failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    sys.exit(0)


SIDE = "side"  # a child's job's to_parent for a side child: a watch that reports to no one


def progress_reporter(to_parent: bool | str, progress_before: tuple[int, float]):
    """The child's compile watch: the progress line on stderr, progress lines on stdout for ChildChain, or none
    shown (a side child: SIDE)."""
    from ..compile_progress import CompileWatch
    from ..compile_progress_line import report_compiles_to_stderr

    if to_parent == SIDE:
        return CompileWatch(lambda progress: None, progress_before=progress_before, quiet_s=float("inf"))
    if not to_parent:
        return report_compiles_to_stderr(progress_before=progress_before, quiet_s=float("inf"))
    return CompileWatch(send_progress, progress_before=progress_before, quiet_s=float("inf"))


def send_progress(progress) -> None:
    write_line(f"progress {progress.num_compiled} {progress.elapsed_s:.3f} {int(progress.is_cached)} "
               f"{int(progress.is_done)} {progress.kernel}")


def write_line(line: str) -> None:
    """One write per line: the watch's thread and the compiling thread both write to stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


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
            write_line(f"cut {total} {elapsed_s:.3f}")
            sys.stderr.flush()
            os._exit(CUT_EXIT)

    with listen_to_compiles(on_event):
        yield
