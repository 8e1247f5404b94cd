"""A fresh install's first run: `pocket generate -n 8` on the default model with an empty numba cache.

Prints the wall time to the first generated token, the whole run's wall and CPU seconds, the peak RSS, how many
kernels compiled, and the costliest compiles (numba's event API, `numba:compile`: inclusive seconds, nested
compiles included, and exclusive seconds, nested compiles taken out). `--tier avx2` forces the AVX2 tier
(kernels_numba.cpu_tier) whatever this CPU has, as users' laptops and desktops do; `--tier native` (default)
lets the CPU pick; `--warm` keeps the cache of a first run and measures a second one. Each run gets its own empty
cache directory unless `--cache-dir` names one.

    python bench/cold_start.py [--tier native|avx2|avx512|amx] [--runs 1] [--warm] [-n 8] [--kv-type T] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import atexit, json, sys, threading, time
from numba.core import event

log_path = sys.argv[1]
records, stack = [], threading.local()

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

event.register("numba:compile", Recorder())
atexit.register(lambda: json.dump(records, open(log_path, "w")))
sys.argv = ["pocket"] + sys.argv[2:]
from pocketcli.cli import main
code = main()
sys.stdout.flush()
sys.exit(code)
"""


def tier_environment(tier: str) -> dict[str, str]:
    """POCKET_CPU_TIER for the child: kernels_numba.cpu_tier sets numba's CPU name and features from it."""
    return {} if tier == "native" else {"POCKET_CPU_TIER": tier}


def run_once(args: argparse.Namespace, cache_dir: Path) -> dict:
    log = cache_dir.parent / f"{cache_dir.name}-events.json"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), **tier_environment(args.tier),
           # a fresh install has no regrouped weights kept either (run_layout_store.py); --warm reuses them
           "POCKET_RUN_LAYOUT_DIR": str(cache_dir.parent / f"{cache_dir.name}-run-layout")}
    command = [sys.executable, "-c", _CHILD, str(log), "generate", "-p", args.prompt, "-n", str(args.n_predict),
               "--temperature", "0"]
    if args.model:
        command += ["-m", args.model]
    if args.kv_type:
        command += ["--kv-type", args.kv_type]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = child.stdout.read(1)
    first_token_s = time.perf_counter() - start if first else None
    rest = child.stdout.read()
    stderr = child.stderr.read().decode(errors="replace")
    child.wait()
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise SystemExit(f"pocket generate failed ({child.returncode}):\n{stderr}")
    events = json.loads(log.read_text()) if log.exists() else []
    return {"tier": args.tier, "first_token_s": first_token_s, "wall_s": wall_s,
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "peak_rss_mb": after.ru_maxrss / 1024, "num_compiles": len(events),
            "compile_s": sum(e["exclusive_s"] for e in events),
            "costliest": sorted(events, key=lambda e: -e["inclusive_s"])[:args.top],
            "text": (first + rest).decode(errors="replace"), "stderr_tail": stderr.strip().splitlines()[-3:]}


def report(run: dict, label: str) -> None:
    print(f"{label} [{run['tier']} tier]: first token {run['first_token_s']:.1f} s, wall {run['wall_s']:.1f} s, "
          f"CPU {run['cpu_s']:.1f} s, peak RSS {run['peak_rss_mb']:.0f} MB, "
          f"{run['num_compiles']} compiles ({run['compile_s']:.1f} s)")
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
