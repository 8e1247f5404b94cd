"""PocketLLM vs llama.cpp on the same GGUF and threads: interleaved A/B runs, ratios of pp, tg and peak RSS.

    python bench/compare_llamacpp.py [-m MODEL] [-p 512] [-n 128] [-r 3] [--threads 2] [--json]

Each run is a fresh process (so peak RSS is per engine); runs alternate A, B, A, B... so drifting machine load
hits both alike. llama-cpp-python is taken from --llamacpp-python, or built into bench/.llamacpp-venv on first use
with the flags these machines need (a native build dies with an illegal instruction here).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".llamacpp-venv"
LLAMACPP_VERSION = "0.3.36"
CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
              "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF")


def llamacpp_python(explicit: str | None) -> str:
    if explicit:
        return explicit
    python = VENV / "bin" / "python"
    if python.exists() and _imports_llama_cpp(str(python)):
        return str(python)
    print(f"building llama-cpp-python {LLAMACPP_VERSION} into {VENV} (several minutes, once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    env = dict(os.environ, CMAKE_ARGS=CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"llama-cpp-python=={LLAMACPP_VERSION}", "numpy"],
                   check=True, env=env)
    return str(python)


def _imports_llama_cpp(python: str) -> bool:
    return subprocess.run([python, "-c", "import llama_cpp"], capture_output=True).returncode == 0


def run_json(cmd: list[str]) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(cmd)}\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rates_by_test(runs: list[dict]) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {}
    for run in runs:
        for result in run["results"]:
            rates.setdefault(result["test"], []).append(result["tokens_per_second_mean"])
    return rates


def describe(rates: list[float]) -> str:
    stdev = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return f"{statistics.fmean(rates):8.2f} ± {stdev:6.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None, help="GGUF path or models.toml name (default model)")
    parser.add_argument("-p", "--n-prompt", type=int, default=512)
    parser.add_argument("-n", "--n-gen", type=int, default=128)
    parser.add_argument("-r", "--rounds", type=int, default=3, help="A/B rounds (fresh processes each)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--llamacpp-python", default=None, help="a python that can import llama_cpp")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    sys.path.insert(0, str(HERE.parent))
    from pocketcli.registry import resolve_model

    model = resolve_model(args.model)
    sizes = ["-p", str(args.n_prompt), "-n", str(args.n_gen)]
    ours_cmd = [sys.executable, "-m", "pocketcli.cli", "bench", "-m", model, *sizes, "-r", "1",
                "--threads", str(args.threads), "--json"]
    theirs_cmd = [llamacpp_python(args.llamacpp_python), str(HERE / "llamacpp_worker.py"), model,
                  "--n-prompt", str(args.n_prompt), "--n-gen", str(args.n_gen), "--threads", str(args.threads)]
    ours, theirs = [], []
    for round_id in range(args.rounds):
        ours.append(run_json(ours_cmd))
        theirs.append(run_json(theirs_cmd))
        print(f"round {round_id + 1}/{args.rounds} done", file=sys.stderr)
    report = summarize(model, args.threads, ours, theirs)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


def summarize(model: str, threads: int, ours: list[dict], theirs: list[dict]) -> dict:
    our_rates, their_rates = rates_by_test(ours), rates_by_test(theirs)
    tests = {}
    for test in our_rates:
        mine, base = our_rates[test], their_rates.get(test, [])
        tests[test] = {"pocketllm": mine, "llama_cpp": base,
                       "ratio": statistics.fmean(mine) / statistics.fmean(base) if base else None}
    rss_ours = max(r["peak_rss_mib"] for r in ours)
    rss_theirs = max(r["peak_rss_mib"] for r in theirs)
    return {"model": model, "threads": threads, "tests": tests, "peak_rss_mib": {"pocketllm": rss_ours,
            "llama_cpp": rss_theirs, "ratio": rss_ours / rss_theirs}}


def print_table(report: dict) -> None:
    print(f"model: {report['model']}  threads: {report['threads']}")
    print(f"| {'test':>6} | {'PocketLLM t/s':>17} | {'llama.cpp t/s':>17} | {'ratio':>6} |")
    for test, row in report["tests"].items():
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "n/a"
        print(f"| {test:>6} | {describe(row['pocketllm'])} | {describe(row['llama_cpp'])} | {ratio:>6} |")
    rss = report["peak_rss_mib"]
    print(f"peak RSS: PocketLLM {rss['pocketllm']:.0f} MiB, llama.cpp {rss['llama_cpp']:.0f} MiB "
          f"({rss['ratio']:.2f}x)")


if __name__ == "__main__":
    main()
