"""PocketLLM vs llama.cpp on the same GGUF and threads: interleaved A/B runs, ratios of pp, tg and peak RSS.

    python bench/compare_llamacpp.py [-m MODEL] [-p 512] [-n 128] [-r 3] [--threads 2] [--tier native|avx2] [--json]
    python bench/compare_llamacpp.py --tier avx2 --build   # only build that tier's llama-cpp-python

Each run is a fresh process (so peak RSS is per engine); runs alternate A, B, A, B... so drifting machine load
hits both alike. --tier picks the instruction set of both sides: native is llama.cpp with AVX-512 beside
PocketLLM's best tier for this CPU; avx2 is llama.cpp without any AVX-512 beside POCKET_CPU_TIER=avx2 (so an
AVX-512 machine measures what an AVX2 laptop gets). llama-cpp-python is taken from --llamacpp-python, or built
into the tier's venv (bench/.llamacpp-venv, bench/.llamacpp-venv-avx2) on first use with fixed flags (a
GGML_NATIVE build dies with an illegal instruction on these machines).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LLAMACPP_VERSION = "0.3.36"
_NO_AMX = "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"


@dataclass(frozen=True)
class Tier:
    """One instruction set for both sides: llama.cpp's build flags and venv, PocketLLM's POCKET_CPU_TIER."""
    name: str
    venv: Path
    cmake_args: str
    pocket_cpu_tier: str | None  # None: PocketLLM picks this CPU's best tier
    no_llamacpp_features: tuple[str, ...] = ()  # llama_print_system_info() must not report these

    def pocket_env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key != "POCKET_CPU_TIER"}
        return env if self.pocket_cpu_tier is None else dict(env, POCKET_CPU_TIER=self.pocket_cpu_tier)


TIERS = {
    "native": Tier("native", HERE / ".llamacpp-venv",
                   "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
                   "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF", None),
    "avx2": Tier("avx2", HERE / ".llamacpp-venv-avx2",
                 "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
                 "-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF "
                 f"-DGGML_AVX512_BF16=OFF {_NO_AMX}", "avx2",
                 ("AVX512 = 1", "AVX512_VNNI = 1", "AVX512_VBMI = 1", "AVX512_BF16 = 1", "AVX_VNNI = 1",
                  "AMX_INT8 = 1")),
}


def llamacpp_python(explicit: str | None, tier: Tier) -> str:
    if explicit:
        return explicit
    python = tier.venv / "bin" / "python"
    if python.exists() and _imports_llama_cpp(str(python)):
        return str(python)
    print(f"building llama-cpp-python {LLAMACPP_VERSION} ({tier.name} tier) into {tier.venv} (several minutes, "
          "once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(tier.venv)], check=True)
    env = dict(os.environ, CMAKE_ARGS=tier.cmake_args, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    # --no-cache-dir: pip's wheel cache is keyed by the source, not CMAKE_ARGS; it would hand one tier the other's
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir",
                    f"llama-cpp-python=={LLAMACPP_VERSION}", "numpy"], check=True, env=env)
    return str(python)


def _imports_llama_cpp(python: str) -> bool:
    return subprocess.run([python, "-c", "import llama_cpp"], capture_output=True).returncode == 0


def llamacpp_system_info(python: str) -> str:
    """llama.cpp's own account of the instruction sets its CPU backend was built with."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def check_llamacpp_tier(python: str, tier: Tier) -> str:
    """llama.cpp's system info, after making sure it uses nothing above the tier (a wrong venv would)."""
    info = llamacpp_system_info(python)
    above = [feature for feature in tier.no_llamacpp_features if feature in info]
    if above:
        raise SystemExit(f"{python}: llama.cpp reports {', '.join(above)}, above the {tier.name} tier:\n{info}")
    return info


@dataclass(frozen=True)
class BenchCommands:
    """The two sides' benchmark command lines (and PocketLLM's environment) for one tier and size."""
    ours: list[str]
    ours_env: dict[str, str]
    theirs: list[str]


def bench_commands(model: str, tier: Tier, n_prompt: int, n_gen: int, threads: int,
                   llamacpp: str) -> BenchCommands:
    sizes = ["-p", str(n_prompt), "-n", str(n_gen)]
    ours = [sys.executable, "-m", "pocketcli.cli", "bench", "-m", model, *sizes, "-r", "1",
            "--threads", str(threads), "--json"]
    theirs = [llamacpp, str(HERE / "llamacpp_worker.py"), model,
              "--n-prompt", str(n_prompt), "--n-gen", str(n_gen), "--threads", str(threads)]
    return BenchCommands(ours, tier.pocket_env(), theirs)


def run_json(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE.parent)
    if done.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(cmd)}\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rounds(commands: BenchCommands, rounds: int) -> tuple[list[dict], list[dict]]:
    """`rounds` alternating runs of each side, fresh processes: (ours, theirs)."""
    ours, theirs = [], []
    for round_id in range(rounds):
        ours.append(run_json(commands.ours, commands.ours_env))
        theirs.append(run_json(commands.theirs))
        print(f"round {round_id + 1}/{rounds} done", file=sys.stderr)
    return ours, theirs


def rates_by_test(runs: list[dict]) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {}
    for run in runs:
        for result in run["results"]:
            rates.setdefault(result["test"], []).append(result["tokens_per_second_mean"])
    return rates


def describe(rates: list[float]) -> str:
    stdev = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return f"{statistics.fmean(rates):8.2f} ± {stdev:6.2f}"


def pocket_cpu_tier(env: dict[str, str]) -> str:
    """The CPU tier PocketLLM's kernels compile for under this environment."""
    code = "import kernels_numba.cpu_tier as t; print(t.apply_cpu_tier())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=HERE.parent,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None, help="GGUF path or models.toml name (default model)")
    parser.add_argument("-p", "--n-prompt", type=int, default=512)
    parser.add_argument("-n", "--n-gen", type=int, default=128)
    parser.add_argument("-r", "--rounds", type=int, default=3, help="A/B rounds (fresh processes each)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tier", choices=sorted(TIERS), default="native",
                        help="instruction set of both sides (avx2: no AVX-512 in either)")
    parser.add_argument("--llamacpp-python", default=None, help="a python that can import llama_cpp")
    parser.add_argument("--build", action="store_true", help="only build (or check) the tier's llama-cpp-python")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    tier = TIERS[args.tier]
    llamacpp = llamacpp_python(args.llamacpp_python, tier)
    llamacpp_info = check_llamacpp_tier(llamacpp, tier)
    if args.build:
        print(f"{llamacpp}: {llamacpp_info}")
        return
    sys.path.insert(0, str(HERE.parent))
    from pocketcli.registry import resolve_model

    model = resolve_model(args.model)
    commands = bench_commands(model, tier, args.n_prompt, args.n_gen, args.threads, llamacpp)
    ours, theirs = run_rounds(commands, args.rounds)
    report = summarize(model, args.threads, ours, theirs)
    report["tier"] = {"name": tier.name, "pocketllm": pocket_cpu_tier(commands.ours_env), "llama_cpp": llamacpp_info}
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
            "llama_cpp": rss_theirs, "ratio": rss_ours / rss_theirs},
            "pocketllm_threads": [r["threads"] for r in ours]}  # --threads is its most: fewer beside busy cores


def enabled_features(system_info: str) -> str:
    """'AVX = 1 | AVX2 = 1 | ...' of llama_print_system_info() as 'AVX AVX2 ...'."""
    return " ".join(part.split("=")[0].strip().split(":")[-1].strip() for part in system_info.split("|")
                    if part.strip().endswith("= 1"))


def print_table(report: dict) -> None:
    print(f"model: {report['model']}  threads: {report['threads']} (PocketLLM ended its runs on "
          f"{report['pocketllm_threads']})")
    if "tier" in report:
        tier = report["tier"]
        print(f"tier: {tier['name']} (PocketLLM {tier['pocketllm']}; llama.cpp {enabled_features(tier['llama_cpp'])})")
    print(f"| {'test':>6} | {'PocketLLM t/s':>17} | {'llama.cpp t/s':>17} | {'ratio':>6} |")
    for test, row in report["tests"].items():
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "n/a"
        print(f"| {test:>6} | {describe(row['pocketllm'])} | {describe(row['llama_cpp'])} | {ratio:>6} |")
    rss = report["peak_rss_mib"]
    print(f"peak RSS: PocketLLM {rss['pocketllm']:.0f} MiB, llama.cpp {rss['llama_cpp']:.0f} MiB "
          f"({rss['ratio']:.2f}x)")


if __name__ == "__main__":
    main()
