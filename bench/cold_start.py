"""A fresh install's first run: `pocket generate -n 8` on the default model with an empty numba cache.

Prints the wall time to the first generated token, the whole run's wall and CPU seconds, the peak RSS (the
largest process's, and the peak of the process tree's RSS summed: a first run compiles in child processes,
pocketcli/commands/first_run.py), how many kernels compiled in the command's process and in those children, and
the command's costliest compiles (numba's event API, `numba:compile`: inclusive seconds, nested
compiles included, and exclusive seconds, nested compiles taken out). `--tier avx2` forces the AVX2 tier
(kernels_numba.cpu_tier) whatever this CPU has, as users' laptops and desktops do; `--tier native` (default)
lets the CPU pick; `--warm` keeps the cache of a first run and measures a second one; `--chat` times a piped
`pocket chat --plain` (the chat's default model unless -m names one; the first token is the reply's). Each run gets
its own empty cache directory unless `--cache-dir` names one.

    python bench/cold_start.py [--tier native|avx2|avx512|amx] [--runs 1] [--warm] [--chat] [-n 8] [--kv-type T]
                               [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_CHILD = r"""
import atexit, importlib.abc, importlib.util, json, sys, threading, time

log_path = sys.argv[1]
records, stack = [], threading.local()

def make_recorder(event):
    class Recorder(event.Listener):
        def on_start(self, ev):
            frames = getattr(stack, "frames", None)
            if frames is None:
                frames = stack.frames = []
            frames.append([time.perf_counter(), 0.0])

        def on_end(self, ev):
            start, nested = stack.frames.pop()
            seconds = time.perf_counter() - start
            if stack.frames:
                stack.frames[-1][1] += seconds
            dispatcher = ev.data.get("dispatcher")
            name = getattr(getattr(dispatcher, "py_func", None), "__module__", "?") + "." + getattr(
                getattr(dispatcher, "py_func", None), "__qualname__", str(dispatcher))
            literals = [str(getattr(t, "literal_value", "")) for t in ev.data.get("args", ()) or ()]
            if any(literals):  # a leaf compiled per quant type: name its literal arguments
                name += "[" + ",".join(value for value in literals if value) + "]"
            records.append({"kernel": name, "inclusive_s": seconds, "exclusive_s": seconds - nested})
    return Recorder()

# the recorder registers once pocket imports numba itself: importing numba here would add ~80 MB to a first run's
# command process, which keeps numba out while its children compile (pocketcli/commands/first_run.py)
class RecordOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "numba.core.event":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module
        def exec_and_register(module):
            exec_module(module)
            module.register("numba:compile", make_recorder(module))
        spec.loader.exec_module = exec_and_register
        return spec

sys.meta_path.insert(0, RecordOnImport())
atexit.register(lambda: json.dump(records, open(log_path, "w")))
sys.argv = ["pocket"] + sys.argv[2:]
from pocketcli.cli import main
code = main()
sys.stdout.flush()
sys.exit(code)
"""


class TreeMemory:
    """The process tree under one pid, sampled every interval_s from /proc (Linux): the peak of its processes'
    RSS summed (what the machine must hold at once) and the largest one process reached between samples.
    ru_maxrss of the children is the max over processes only, and a first run's compiling children
    (pocketcli/commands/first_run.py) overlap their parent."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        self.pid, self.interval_s = pid, interval_s
        self.peak_sum_bytes = self.peak_one_bytes = 0
        self.max_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._page_bytes = os.sysconf("SC_PAGE_SIZE")

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            sizes = [self._rss_bytes(pid) for pid in self._tree()]
            self.peak_sum_bytes = max(self.peak_sum_bytes, sum(sizes))
            self.peak_one_bytes = max([self.peak_one_bytes, *sizes])
            self.max_processes = max(self.max_processes, len(sizes))

    def _tree(self) -> list[int]:
        parents = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:  # the command name may hold spaces: the fields after its closing parenthesis
                    parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        tree, frontier = [], [self.pid]
        while frontier:
            pid = frontier.pop()
            tree.append(pid)
            frontier += [child for child, parent in parents.items() if parent == pid]
        return tree

    def _rss_bytes(self, pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * self._page_bytes
        except (OSError, IndexError, ValueError):
            return 0


def child_compiles(stderr: str) -> int:
    """Kernels the first run's children compiled (pocketcli/commands/first_run.py): the first summary line after its
    notice, which the last child prints with the count carried over all of them (only the last completes); the
    command's own compiles are counted by its event log."""
    _, notice, after = stderr.replace("\r", "\n").partition("first run: compiling")
    counts = [int(line.split()[1]) for line in after.splitlines()
              if line.startswith("compiled ") and line.split()[1].isdigit()]
    return counts[0] if notice and counts else 0


def tier_environment(tier: str) -> dict[str, str]:
    """POCKET_CPU_TIER for the child: kernels_numba.cpu_tier sets numba's CPU name and features from it."""
    return {} if tier == "native" else {"POCKET_CPU_TIER": tier}


def run_once(args: argparse.Namespace, cache_dir: Path) -> dict:
    log = cache_dir.parent / f"{cache_dir.name}-events.json"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), **tier_environment(args.tier),
           # a fresh install has no regrouped weights kept either (run_layout_store.py); --warm reuses them
           "POCKET_RUN_LAYOUT_DIR": str(cache_dir.parent / f"{cache_dir.name}-run-layout")}
    if args.chat:  # the chat's first reply: a piped `chat --plain`, the prompt on stdin
        command = [sys.executable, "-c", _CHILD, str(log), "chat", "--plain", "-n", str(args.n_predict),
                   "--temperature", "0"]
    else:
        command = [sys.executable, "-c", _CHILD, str(log), "generate", "-p", args.prompt, "-n", str(args.n_predict),
                   "--temperature", "0"]
    if args.model:
        command += ["-m", args.model]
    if args.kv_type:
        command += ["--kv-type", args.kv_type]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdin.write(args.prompt.encode() if args.chat else b"")
    child.stdin.close()
    with TreeMemory(child.pid) as memory:
        stderr_lines = []
        reader = threading.Thread(target=lambda: stderr_lines.append(child.stderr.read()), daemon=True)
        reader.start()  # a child's progress lines must not fill the pipe while stdout is read
        first = child.stdout.read(1)
        first_token_s = time.perf_counter() - start if first else None
        rest = child.stdout.read()
        reader.join()
        child.wait()
    stderr = b"".join(stderr_lines).decode(errors="replace")
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise SystemExit(f"pocket generate failed ({child.returncode}):\n{stderr}")
    events = json.loads(log.read_text()) if log.exists() else []
    return {"tier": args.tier, "first_token_s": first_token_s, "wall_s": wall_s,
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "peak_rss_mb": after.ru_maxrss / 1024, "peak_tree_rss_sum_mb": memory.peak_sum_bytes / 2**20,
            "peak_tree_rss_one_mb": memory.peak_one_bytes / 2**20, "max_processes": memory.max_processes,
            "num_compiles": len(events), "num_child_compiles": child_compiles(stderr),
            "compile_s": sum(e["exclusive_s"] for e in events),
            "costliest": sorted(events, key=lambda e: -e["inclusive_s"])[:args.top],
            "text": (first + rest).decode(errors="replace"), "stderr_tail": stderr.strip().splitlines()[-3:]}


def report(run: dict, label: str) -> None:
    print(f"{label} [{run['tier']} tier]: first token {run['first_token_s']:.1f} s, wall {run['wall_s']:.1f} s, "
          f"CPU {run['cpu_s']:.1f} s, peak RSS {run['peak_rss_mb']:.0f} MB (one process; the tree summed, "
          f"sampled every 50 ms: {run['peak_tree_rss_sum_mb']:.0f} MB over up to {run['max_processes']} "
          f"processes), {run['num_compiles']} compiles ({run['compile_s']:.1f} s) in the command's process, "
          f"{run['num_child_compiles']} in first-run children")
    for event in run["costliest"]:
        print(f"  {event['inclusive_s']:7.2f} s incl  {event['exclusive_s']:7.2f} s excl  {event['kernel']}")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="native", choices=["native", "avx2", "avxvnni", "avx512", "amx", "generic"])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("-p", "--prompt", default="The capital of France is")
    parser.add_argument("-n", "--n-predict", type=int, default=8)
    parser.add_argument("--kv-type", default=None, help="pocket generate's --kv-type (default: its default, f16)")
    parser.add_argument("--chat", action="store_true",
                        help="time a piped `pocket chat --plain` (the prompt on stdin; its default model) instead")
    parser.add_argument("--runs", type=int, default=1, help="cold runs, each with a new empty cache")
    parser.add_argument("--warm", action="store_true", help="also time a second run on the first run's cache")
    parser.add_argument("--top", type=int, default=15, help="costliest compiles to list")
    parser.add_argument("--cache-dir", default=None, help="use (and keep) this cache dir instead of a fresh one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores", file=sys.stderr)
    results = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="pocket-cold-") as scratch:
            cache_dir = Path(args.cache_dir) if args.cache_dir else Path(scratch) / "numba"
            cold = run_once(args, cache_dir)
            results.append({"cold": cold})
            if not args.json:
                report(cold, f"cold run {index + 1}")
            if args.warm:
                warm = run_once(args, cache_dir)
                results[-1]["warm"] = warm
                if not args.json:
                    report(warm, f"warm run {index + 1}")
    if args.json:
        print(json.dumps({"cpu": cpu_name(), "runs": results}, indent=1))


if __name__ == "__main__":
    main()
