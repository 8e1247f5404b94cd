"""Decode speed with cores taken by other processes: tg of PocketLLM and llama.cpp side by side, idle and busy.

    python bench/busy_machine.py [-m MODEL] [-n 128] [-r 3] [--threads 2] [--busy-cores 1] [--tier native|avx2]
                                 [--json]

Each round runs, in fresh processes and alternating, PocketLLM (`pocket bench --threads N`: at most N threads,
fewer while other processes keep cores busy) and llama.cpp (llama-cpp-python, exactly N threads), first with no
load of ours, then beside --busy-cores separate Python processes that spin (one core each). Reported: each side's
tg rate idle and busy, busy/idle (how it degrades: one of two cores taken leaves about 1/2 to 2/3), and PocketLLM
over llama.cpp under the same load. The machine's other load (shared hosts) is not controlled: rounds alternate
so that drift hits both sides alike. The llama.cpp side is built as compare_llamacpp.py builds it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from contextlib import contextmanager

from compare_llamacpp import HERE, TIERS, bench_commands, check_llamacpp_tier, llamacpp_python, run_json

SPIN = "while True: pass"


@contextmanager
def busy_cores(count: int):
    """`count` separate processes spinning on the CPU for the duration (each keeps a core busy)."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def tg_rate(run: dict) -> float:
    return run["results"][-1]["tokens_per_second_mean"]


def measure(commands, rounds: int, busy: int) -> dict[str, list[float]]:
    """tg rates of each side over `rounds` alternating rounds with `busy` spinning processes."""
    rates: dict[str, list[float]] = {"pocketllm": [], "llama_cpp": [], "pocketllm_threads": []}
    with busy_cores(busy):
        for round_id in range(rounds):
            ours = run_json(commands.ours, commands.ours_env)
            rates["pocketllm"].append(tg_rate(ours))
            rates["pocketllm_threads"].append(ours["threads"])  # the count it ended on
            rates["llama_cpp"].append(tg_rate(run_json(commands.theirs)))
            print(f"{busy} busy: round {round_id + 1}/{rounds} done", file=sys.stderr)
    return rates


def summarize(idle: dict[str, list], busy: dict[str, list]) -> dict:
    mean = statistics.fmean
    sides = {side: {"idle": idle[side], "busy": busy[side], "busy_over_idle": mean(busy[side]) / mean(idle[side])}
             for side in ("pocketllm", "llama_cpp")}
    return {"sides": sides, "pocketllm_threads": {"idle": idle["pocketllm_threads"],
                                                  "busy": busy["pocketllm_threads"]},
            "pocketllm_over_llama_cpp": {
        "idle": mean(idle["pocketllm"]) / mean(idle["llama_cpp"]),
        "busy": mean(busy["pocketllm"]) / mean(busy["llama_cpp"])}}


def print_table(report: dict) -> None:
    print(f"model: {report['model']}  threads: {report['threads']}  busy cores: {report['busy_cores']} of "
          f"{os.cpu_count()}  tier: {report['tier']}")
    print(f"| {'engine':<10} | {'idle tg t/s':>16} | {'busy tg t/s':>16} | {'busy/idle':>9} |")
    for side, row in report["sides"].items():
        idle, busy = (f"{statistics.fmean(row[k]):7.2f} ± {statistics.pstdev(row[k]):5.2f}" for k in ("idle", "busy"))
        print(f"| {side:<10} | {idle:>16} | {busy:>16} | {row['busy_over_idle']:8.2f}x |")
    ratio = report["pocketllm_over_llama_cpp"]
    threads = report["pocketllm_threads"]
    print(f"PocketLLM / llama.cpp: idle {ratio['idle']:.2f}x, busy {ratio['busy']:.2f}x  (PocketLLM's threads at "
          f"the end of each run: idle {threads['idle']}, busy {threads['busy']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None, help="GGUF path or models.toml name (default model)")
    parser.add_argument("-n", "--n-gen", type=int, default=128)
    parser.add_argument("-r", "--rounds", type=int, default=3, help="A/B rounds per load (fresh processes each)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--busy-cores", type=int, default=1, help="spinning processes during the busy rounds")
    parser.add_argument("--tier", choices=sorted(TIERS), default="native")
    parser.add_argument("--llamacpp-python", default=None, help="a python that can import llama_cpp")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    tier = TIERS[args.tier]
    llamacpp = llamacpp_python(args.llamacpp_python, tier)
    check_llamacpp_tier(llamacpp, tier)
    sys.path.insert(0, str(HERE.parent))
    from pocketcli.registry import resolve_model

    model = resolve_model(args.model)
    commands = bench_commands(model, tier, 0, args.n_gen, args.threads, llamacpp)
    idle = measure(commands, args.rounds, 0)
    busy = measure(commands, args.rounds, args.busy_cores)
    report = {"model": model, "threads": args.threads, "busy_cores": args.busy_cores, "tier": tier.name,
              **summarize(idle, busy)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
