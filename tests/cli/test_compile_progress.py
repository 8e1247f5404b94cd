"""Kernel compile progress on stderr: a tiny njit kernel compiled under the reporter shows up, with a summary; a
warm cache prints nothing; a terminal gets one line rewritten in place, a log a line every few seconds."""
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import pytest

from pocketcli.compile_progress import CompileProgress
from pocketcli.compile_progress_line import LogProgressLines, TerminalProgressLine, report_compiles_to_stderr

ROOT = Path(__file__).resolve().parents[2]
FAST = {"tick_s": 0.02, "quiet_s": 0.05}
KERNELS = """
import numba

@numba.njit(cache={cache})
def add_one(x):
    return x + 1.0

@numba.njit(cache={cache})
def twice_plus_one(x):
    return 2.0 * add_one(x)
"""


class TerminalBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def make_kernel():
    """A fresh (uncached) kernel calling another: its first call compiles two kernels, nested."""
    namespace: dict = {}
    exec(KERNELS.format(cache=False), namespace)
    return namespace["twice_plus_one"]


def test_compiles_are_reported_with_a_summary(capsys):
    kernel = make_kernel()
    with report_compiles_to_stderr(**FAST):
        assert kernel(1.0) == 4.0
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("compiled 2 kernels in ") and "cached" not in err


def test_the_watch_totals_its_compile_seconds_for_timing_lines(capsys):
    kernel = make_kernel()
    with report_compiles_to_stderr(**FAST) as compiles:
        kernel(1.0)
    summary = capsys.readouterr().err.splitlines()[-1]  # "compiled 2 kernels in S s"
    assert compiles.compiled_seconds == pytest.approx(float(summary.split(" in ")[1].split()[0]), abs=0.051)
    with report_compiles_to_stderr(**FAST) as warm:
        kernel(2.0)
    assert warm.compiled_seconds == 0.0


def test_terminal_line_is_rewritten_then_summarised():
    stream = TerminalBuffer()
    kernel = make_kernel()
    with report_compiles_to_stderr(stream=stream, **FAST):
        kernel(1.0)
    assert stream.getvalue().startswith("\r\x1b[K") and stream.getvalue().endswith(" s\n")
    assert "\r\x1b[Kcompiled 2 kernels in " in stream.getvalue()


def test_nothing_compiled_prints_nothing(capsys):
    kernel = make_kernel()
    kernel(1.0)
    with report_compiles_to_stderr(**FAST), report_compiles_to_stderr(stream=TerminalBuffer(), **FAST):
        kernel(2.0)
    assert capsys.readouterr().err == ""


def test_failed_compile_is_not_counted(capsys):
    @numba.njit(cache=False)
    def add_text(x):
        return x + "text"

    with report_compiles_to_stderr(**FAST), pytest.raises(numba.core.errors.TypingError):
        add_text(1.0)
    assert "compiled" not in capsys.readouterr().err


def test_text_is_held_while_kernels_compile():
    stream = io.StringIO()
    kernel = make_kernel()
    seen = []

    def pieces():
        yield "a"
        kernel(1.0)  # a burst of compiles: lasts until quiet_s without one
        yield "b"
        yield "c"

    with report_compiles_to_stderr(stream=stream, tick_s=0.02, quiet_s=0.5) as compiles:
        for text in compiles.stream_after_compiles(pieces()):
            seen.append((text, "compiled 2 kernels" in stream.getvalue()))
    assert seen == [("a", False), ("bc", True)]


def test_warm_cache_prints_nothing(tmp_path):
    """With cache=True, a second process loads the kernels from NUMBA_CACHE_DIR: no compile, no output."""
    (tmp_path / "tiny_kernels.py").write_text(KERNELS.format(cache=True))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from pocketcli.compile_progress_line import report_compiles_to_stderr
        with report_compiles_to_stderr(tick_s=0.02, quiet_s=0.05):
            import tiny_kernels
            tiny_kernels.twice_plus_one(1.0)
    """)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> str:
        completed = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                                   text=True, timeout=120)
        assert completed.returncode == 0, completed.stderr
        return completed.stderr

    summary = run().splitlines()[-1]
    assert summary.startswith("compiled 2 kernels in ") and summary.endswith(" s (cached for later runs)")
    assert run() == ""


def test_progress_text():
    progress = CompileProgress("rms_norm", 12, True, 8.06, expected_total=37)
    assert progress.describe() == "compiling kernels (12 of 37, 8.1 s): rms_norm"
    assert CompileProgress("rope", 3, False, 1.0).describe() == "compiling kernels (3 done, 1.0 s): rope"
    assert CompileProgress("rope", 37, True, 41.24).summary() == "compiled 37 kernels in 41.2 s (cached for later runs)"
    assert CompileProgress("rope", 1, False, 0.5).summary() == "compiled 1 kernel in 0.5 s"


def test_log_lines_are_throttled():
    stream = io.StringIO()
    show = LogProgressLines(stream, interval_s=60)
    for num_compiled in (1, 2, 3):
        show(CompileProgress("rope", num_compiled, True, 0.1 * num_compiled))
    show(CompileProgress("rope", 4, True, 0.4, is_done=True))
    assert stream.getvalue().splitlines() == ["compiling kernels (1 done, 0.1 s): rope",
                                              "compiled 4 kernels in 0.4 s (cached for later runs)"]


def test_terminal_line_fits_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "30")
    stream = TerminalBuffer()
    TerminalProgressLine(stream)(CompileProgress("a_very_long_kernel_name_indeed", 5, True, 2.0))
    assert stream.getvalue() == "\r\x1b[K" + "compiling kernels (5 done, 2.0 s): a_very"[:29]
