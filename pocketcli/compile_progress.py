"""Kernel compile progress: numba's compile events (kernels_numba.compile_events) gathered into bursts and
reported while one lasts, to a line on stderr (compile_progress_line.py) or to the chat app's status bar.

A burst starts with a compile and ends once none has run for quiet_s (or the watch closes): the kernels compile
at the first prefill and the first decode step, moments apart, then not again. With numba's cache warm nothing
compiles, and nothing is reported.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kernels_numba.compile_events import CompileEvent, listen_to_compiles
from kernels_numba.compile_memory import release_memory_around_compiles

TICK_S = 0.2  # 5 reports a second while kernels compile
QUIET_S = 1.0  # no compile for this long ends a burst


@dataclass(frozen=True)
class CompileProgress:
    kernel: str  # compiling now (the innermost of nested compiles, numba's helpers passed over), or the last one
    # every compile numba reports, nested ones and numba's helpers included, failed ones not: as
    # bench/cold_start.py counts them, so that an expected total measured there matches
    num_compiled: int
    is_cached: bool  # the kernels went to numba's on-disk cache (their helpers go inside them): later runs load them
    elapsed_s: float
    expected_total: int | None = None
    is_done: bool = False

    def describe(self) -> str:
        count = f"{self.num_compiled} of {self.expected_total}" if self.expected_total else f"{self.num_compiled} done"
        return f"compiling kernels ({count}, {self.elapsed_s:.1f} s): {self.kernel}"

    def summary(self) -> str:
        """One line once the burst is done; empty when every compile in it failed (the error says enough)."""
        if not self.num_compiled:
            return ""
        kernels = "1 kernel" if self.num_compiled == 1 else f"{self.num_compiled} kernels"
        cached = " (cached for later runs)" if self.is_cached else ""
        return f"compiled {kernels} in {self.elapsed_s:.1f} s{cached}"


@dataclass
class CompileBurst:
    started_at: float
    last_end_at: float
    compiling: list[CompileEvent] = field(default_factory=list)  # numba compiles one at a time: nested on top
    last_kernel: str = ""
    num_compiled: int = 0
    is_cached: bool = False

    def record(self, event: CompileEvent, now: float) -> None:
        if event.is_start:
            self.compiling.append(event)
            return
        if self.compiling:
            self.compiling.pop()
        self.last_end_at = now
        self.last_kernel = self.last_kernel if event.is_numba_helper and self.last_kernel else event.kernel
        if not event.is_failed:
            self.num_compiled += 1
            self.is_cached = self.is_cached or event.is_cached

    def kernel(self) -> str:
        """The innermost kernel compiling now; numba's own helpers ("impl", "len_impl") tell the user nothing."""
        ours = [event.kernel for event in self.compiling if not event.is_numba_helper]
        return ours[-1] if ours else self.compiling[-1].kernel if self.compiling else self.last_kernel

    def is_quiet(self, now: float, quiet_s: float) -> bool:
        return not self.compiling and now - self.last_end_at >= quiet_s

    def progress(self, now: float, expected_total: int | None, is_done: bool) -> CompileProgress:
        end = self.last_end_at if is_done and not self.compiling else now
        return CompileProgress(self.kernel(), self.num_compiled, self.is_cached, end - self.started_at,
                               expected_total, is_done)


class CompileWatch:
    """While open (a `with` block), reports each burst of compiles to on_progress: every tick_s while it lasts,
    then once with is_done. on_progress runs on the watch's own thread, never under numba's compiler lock.
    progress_before (kernels, seconds) carries on a count that earlier processes started (commands/first_run.py):
    the first burst starts from it, as if it began that many seconds before the watch opened.
    While open, each compile also gives back the memory it does not need (kernels_numba/compile_memory.py): every
    command that may compile kernels opens a watch."""

    def __init__(self, on_progress: Callable[[CompileProgress], None], expected_total: int | None = None,
                 tick_s: float = TICK_S, quiet_s: float = QUIET_S, progress_before: tuple[int, float] = (0, 0.0)):
        self.on_progress = on_progress
        self.opened_at = time.perf_counter()
        self.progress_before = progress_before
        self.expected_total = expected_total
        self.tick_s, self.quiet_s = tick_s, quiet_s
        self.lock = threading.Condition()
        self.burst: CompileBurst | None = None
        self.num_bursts_started = self.num_bursts_reported = 0
        self.compiled_seconds = 0.0  # the finished bursts' time, all told (timing lines say what it includes)
        self.is_closing = False
        self._listening = listen_to_compiles(self._record)
        self._releasing = release_memory_around_compiles()
        self._reporter = threading.Thread(target=self._report_bursts, name="compile-progress", daemon=True)

    def __enter__(self) -> CompileWatch:
        self._releasing.__enter__()
        self._listening.__enter__()
        self._reporter.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._listening.__exit__(None, None, None)
        self._releasing.__exit__(None, None, None)
        with self.lock:
            self.is_closing = True
            self.lock.notify_all()
        self._reporter.join()

    def is_compiling(self) -> bool:
        """A burst is under way: its summary is not reported yet."""
        with self.lock:
            return self.num_bursts_started != self.num_bursts_reported

    def settle(self) -> None:
        """Waits until the burst under way (if any) has ended and its summary is reported."""
        with self.lock:
            self.lock.wait_for(lambda: self.num_bursts_started == self.num_bursts_reported)

    def stream_after_compiles(self, pieces: Iterable[str]) -> Iterator[str]:
        """The text pieces, held back while kernels compile so that a progress line does not cut into them."""
        held: list[str] = []
        for piece in pieces:
            held.append(piece)
            if not self.is_compiling():
                yield "".join(held)
                held = []
        if held:
            self.settle()
            yield "".join(held)

    def progress_so_far(self) -> tuple[int, float]:
        """(kernels compiled, seconds) of the burst under way, the count carried on from progress_before."""
        with self.lock:
            if self.burst is None:
                return self.progress_before
            return self.burst.num_compiled, time.perf_counter() - self.burst.started_at

    # --- the compiling thread, under numba's compiler lock ----------------------------------------------
    def _record(self, event: CompileEvent) -> None:
        now = time.perf_counter()
        with self.lock:
            if self.burst is None:
                num_before, seconds_before = self.progress_before
                started_at = self.opened_at - seconds_before if num_before else now
                self.burst = CompileBurst(started_at=started_at, last_end_at=now, num_compiled=num_before)
                self.progress_before = (0, 0.0)
                self.num_bursts_started += 1
                self.lock.notify_all()
            self.burst.record(event, now)

    # --- the watch's thread -----------------------------------------------------------------------------
    def _report_bursts(self) -> None:
        while self._wait_for_burst():
            while not self._report_tick():
                pass

    def _wait_for_burst(self) -> bool:
        with self.lock:
            self.lock.wait_for(lambda: self.burst is not None or self.is_closing)
            return self.burst is not None

    def _report_tick(self) -> bool:
        """Reports the burst under way after one tick; True once that report was its last."""
        with self.lock:
            self.lock.wait_for(lambda: self.is_closing, timeout=self.tick_s)
            now = time.perf_counter()
            is_done = self.is_closing or self.burst.is_quiet(now, self.quiet_s)
            progress = self.burst.progress(now, self.expected_total, is_done)
            if is_done:
                self.burst = None
        try:
            self.on_progress(progress)
        except Exception:  # a display that fails (stderr closed) must not end the reports nor hang settle()
            pass
        if is_done:
            with self.lock:
                self.num_bursts_reported += 1
                self.compiled_seconds += progress.elapsed_s if progress.num_compiled else 0.0
                self.lock.notify_all()
        return is_done
