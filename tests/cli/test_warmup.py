"""`pocket warmup`, and a first `pocket generate` on an empty cache: up to its first token the kernels compile in
child processes (pocketcli/commands/first_run.py); warmup compiles the rest of its set."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pocketcli.cli import main
from pocketcli.commands.first_run import MIN_SIDE_CHILD_CORES, usable_cores

ROOT = Path(__file__).resolve().parents[2]
# a fresh `pocket generate` that prints, last, how many kernels numba compiled (its event API; cache loads are silent)
COUNT_COMPILES = """
import sys
from numba.core import event

recorder = event.RecordingListener()
event.register("numba:compile", recorder)
from pocketcli.cli import main

code = main(sys.argv[1:])
print(f"compiles: {sum(1 for _, ev in recorder.buffer if ev.is_end)}")
sys.exit(code)
"""


def test_jobs_must_be_positive(capsys):
    assert main(["warmup", "--jobs", "0"]) == 2
    assert "error: --jobs must be >= 1, got 0" in capsys.readouterr().err


def pocket(args: list[str], env: dict, code: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "pocketcli.cli", *args]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


@pytest.mark.slow
def test_first_run_compiles_in_children_then_warmup_compiles_the_rest(tmp_path):
    """The default model, an empty cache: a minute of compiling on 2 cores, once. A first `pocket generate`
    compiles up to its first token in child processes (commands/first_run.py), the decode steps' kernels in a side
    child beside them (in its own process on a single core); `pocket warmup` then compiles the rest of its set (the
    README's advice for a pip install)."""
    cache_dir = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "POCKET_FIRST_RUN_CHILDREN": "1"}
    generate = ["generate", "-p", "The capital of France is", "-n", "4", "--temperature", "0"]
    first = pocket(generate, env, code=COUNT_COMPILES)
    _, notice, children = first.stderr.partition("first run: compiling the CPU kernels")
    assert notice, first.stderr[-3000:]
    summaries = [line for line in children.splitlines() if line.startswith("compiled ")]
    in_children, in_command = int(summaries[0].split()[1]), int(first.stdout.splitlines()[-1].split()[1])
    if usable_cores() >= MIN_SIDE_CHILD_CORES:  # the decode step's kernels in a side child (0 left, unless it ran late)
        assert in_children > 2 * in_command, first.stderr[-3000:]
    else:  # the prefill's kernels in the children, then the decode's in the command
        assert in_children > 2 * in_command > 0, first.stderr[-3000:]
    warmed = pocket(["warmup"], env)
    assert "warm-up done in" in warmed.stdout and str(cache_dir) in warmed.stdout
    again = pocket(generate, env, code=COUNT_COMPILES)  # warmup's set holds everything a generate needs
    assert "first run" not in again.stderr and again.stdout.splitlines()[-1] == "compiles: 0", again.stderr[-3000:]
