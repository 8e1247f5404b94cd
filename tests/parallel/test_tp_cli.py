"""`--tp` / `--devices` on the CLI: refusals before anything loads, parity, bench's report, Ctrl-C and a killed
rank (every process gone, no shared-memory segment left)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pocketcli.cli import main
from tests.models.tiny_gguf import write_tiny_model

POCKET = [sys.executable, "-m", "pocketcli.cli"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("tp_cli") / "gemma3.gguf", "gemma3", 0, "Q8_0"))


def run_cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", [["generate", "-p", "hi", "-n", "2"], ["bench", "-p", "4", "-n", "2"]])
def test_sizes_that_cannot_split_fail_in_one_line_before_loading(capsys, command):
    started = time.perf_counter()
    code, out, err = run_cli(capsys, *command, "--tp", "3")  # the default model has 4 heads
    assert code == 2 and not out
    assert err.strip().splitlines() == ["error: tensor blk.0.attn_q.weight: 4 attention heads cannot be split over "
                                        "3 ranks (--tp must divide 4)"]
    assert time.perf_counter() - started < 10  # no rank started, no weight read


@pytest.mark.parametrize("flags, message", [(["--tp", "0"], "--tp must be >= 1"),
                                            (["--devices", "0,1"], "--devices picks CUDA devices"),
                                            (["--tp", "2", "--spec", "mtp"], "--spec mtp reads the target")])
def test_bad_parallel_flags(capsys, flags, message):
    code, _, err = run_cli(capsys, "generate", "-p", "hi", "-n", "2", "--device", "cpu", *flags)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_generate_tp2_matches_tp1(capsys, tiny):
    args = ("generate", "-m", tiny, "-p", "abc def", "-n", "8", "--temperature", "0", "--ignore-eos", "--json")
    single = json.loads(run_cli(capsys, *args)[1])
    code, out, _ = run_cli(capsys, *args, "--tp", "2")
    assert code == 0 and json.loads(out)["token_ids"] == single["token_ids"]


def test_bench_reports_rank_weights_and_all_reduce_share(capsys, tiny):
    code, out, _ = run_cli(capsys, "bench", "-m", tiny, "-p", "8", "-n", "4", "-r", "1", "--tp", "2", "--json")
    assert code == 0
    report = json.loads(out)["tensor_parallel"]
    assert report["tp_size"] == 2 and len(report["rank_weight_bytes"]) == 2
    assert 0 < report["rank_weight_bytes"][0] < os.path.getsize(tiny)
    assert 0 < report["all_reduce_time_share"] < 1
    code, out, _ = run_cli(capsys, "bench", "-m", tiny, "-p", "8", "-n", "4", "-r", "1", "--tp", "2")
    assert "tensor parallel: 2 ranks; weights rank 0" in out and "all-reduce + gather:" in out


def test_chat_plain_pipe_under_tp2(tiny):
    single = subprocess.run(POCKET + ["chat", "-m", tiny, "--no-save", "-n", "6", "--temperature", "0"],
                            input="abc", capture_output=True, text=True, timeout=120)
    split = subprocess.run(POCKET + ["chat", "-m", tiny, "--no-save", "-n", "6", "--temperature", "0", "--tp", "2"],
                           input="abc", capture_output=True, text=True, timeout=120)
    assert split.returncode == 0, split.stderr
    assert split.stdout == single.stdout


def test_serve_flags_reach_the_engine_config(tiny):
    from pocketcli.cli import make_parser
    from pocketcli.commands.serve import make_engine_config

    args = make_parser().parse_args(["serve", "-m", tiny, "--tp", "2", "--device", "cpu"])
    config = make_engine_config(args)
    assert (config.tp_size, config.devices) == (2, ())


# --- how the processes end ----------------------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """Every live process under pid (rank 0 -> forkserver -> ranks; resource tracker)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()
            and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]


def start_long_generation(tiny):
    """A --tp 2 generation that runs for a while; returns once it streams text (ranks are up and stepping)."""
    cmd = POCKET + ["generate", "-m", tiny, "-p", "abc", "-n", "1500", "-c", "2048", "--temperature", "0",
                    "--ignore-eos", "--tp", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    proc.stdout.read(1)
    ranks = []
    deadline = time.monotonic() + 30
    while len(ranks) < 1 and time.monotonic() < deadline:  # the rank process is the forkserver's child
        tree = descendants(proc.pid)
        ranks = [pid for pid in tree if pid not in (proc.pid,) and _parent(pid) in tree]
        time.sleep(0.1)
    return proc, descendants(proc.pid), ranks


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def shm_segments() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def wait_gone(pids: list[int], seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


def test_ctrl_c_stops_every_rank(tiny):
    before = shm_segments()
    proc, tree, ranks = start_long_generation(tiny)
    assert ranks, "the rank process did not start"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err.decode()
    assert wait_gone(tree) == []
    assert shm_segments() <= before


def test_a_killed_rank_ends_rank0_with_one_line(tiny):
    before = shm_segments()
    proc, tree, ranks = start_long_generation(tiny)
    assert ranks, "the rank process did not start"
    os.kill(ranks[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 2, err
    assert lines[-1] == "error: tensor-parallel rank 1 exited (code -9) before finishing"
    assert wait_gone(tree) == []
    assert shm_segments() <= before
