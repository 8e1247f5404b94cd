"""Kernel compile progress on stderr: on a terminal one line rewritten in place, in a log (CI, a server's journal)
a plain line at most every LOG_INTERVAL_S; a summary line either way once the kernels are compiled."""
from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .compile_progress import CompileProgress, CompileWatch

LOG_INTERVAL_S = 5.0
CLEAR_LINE = "\r\x1b[K"


class TerminalProgressLine:
    def __init__(self, stream: TextIO):
        self.stream = stream

    def __call__(self, progress: CompileProgress) -> None:
        if progress.is_done:
            summary = progress.summary()
            self.stream.write(f"{CLEAR_LINE}{summary}\n" if summary else CLEAR_LINE)
        else:  # cut to the terminal's width: a wrapped line could not be rewritten in place
            width = shutil.get_terminal_size().columns - 1
            self.stream.write(CLEAR_LINE + progress.describe()[:width])
        self.stream.flush()


class LogProgressLines:
    def __init__(self, stream: TextIO, interval_s: float = LOG_INTERVAL_S):
        self.stream = stream
        self.interval_s = interval_s
        self.last_line_at: float | None = None

    def __call__(self, progress: CompileProgress) -> None:
        now = time.monotonic()
        if progress.is_done:
            self.last_line_at = None
            if progress.summary():
                print(progress.summary(), file=self.stream, flush=True)
        elif self.last_line_at is None or now - self.last_line_at >= self.interval_s:
            self.last_line_at = now
            print(progress.describe(), file=self.stream, flush=True)


def make_progress_line(stream: TextIO):
    return TerminalProgressLine(stream) if stream.isatty() else LogProgressLines(stream)


@contextmanager
def report_compiles_to_stderr(expected_total: int | None = None, stream: TextIO | None = None,
                              **watch_options) -> Iterator[CompileWatch]:
    """Kernel compiles inside the block shown on stderr (silent when none compiles: a warm cache)."""
    with CompileWatch(make_progress_line(stream or sys.stderr), expected_total, **watch_options) as watch:
        yield watch
