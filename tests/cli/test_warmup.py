"""`pocket warmup`: after it, a fresh `pocket generate` on the same model compiles no kernel."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pocketcli.cli import main

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
def test_generate_after_warmup_compiles_nothing(tmp_path):
    """The default model, an empty cache: minutes of compiling on 2 cores, once."""
    cache_dir = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    warmed = pocket(["warmup"], env)
    assert "warm-up done in" in warmed.stdout and str(cache_dir) in warmed.stdout
    generated = pocket(["generate", "-p", "The capital of France is", "-n", "4", "--temperature", "0"], env,
                       code=COUNT_COMPILES)
    assert generated.stdout.splitlines()[-1] == "compiles: 0"
