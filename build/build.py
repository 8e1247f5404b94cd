"""Build the one-file `pocket` binary with PyInstaller and print its size.

    python build/build.py [--distpath dist] [--workpath .pyinstaller-work] [--cuda auto|on|off] [--clean]
                          [--kernel-tiers avx2,avxvnni,avx512,amx|none] [--kernel-model MODEL]

PyInstaller's work files go to .pyinstaller-work/ (its default, ./build, is this source directory). The binary
ships the kernels compiled for each CPU tier of --kernel-tiers (kernel_cache.py: minutes per tier), so its first
run on those CPUs compiles nothing; `none` skips them (a first run then compiles for minutes).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import kernel_cache

BUILD_DIR = Path(__file__).resolve().parent
ROOT = BUILD_DIR.parent
SPEC = BUILD_DIR / "pocket.spec"
MIB = 1 << 20


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="build dist/pocket, a one-file PocketLLM binary")
    parser.add_argument("--distpath", type=Path, default=ROOT / "dist", help="where the binary goes (default dist/)")
    parser.add_argument("--workpath", type=Path, default=ROOT / ".pyinstaller-work",
                        help="PyInstaller's work files (default .pyinstaller-work/)")
    parser.add_argument("--cuda", choices=("auto", "on", "off"), default="auto",
                        help="bundle numba-cuda and NVIDIA's libraries (auto: when numba-cuda is installed)")
    parser.add_argument("--clean", action="store_true", help="drop PyInstaller's caches first")
    parser.add_argument("--kernel-tiers", type=kernel_cache.parse_tiers, default=kernel_cache.TIERS,
                        help="CPU tiers whose compiled kernels the binary ships: some of "
                             "avx2,avxvnni,avx512,amx, or none (default: all)")
    parser.add_argument("--kernel-model", default=None, metavar="MODEL",
                        help="the model whose kernels are compiled for them (default: the registry's default)")
    return parser


def binary_path(distpath: Path) -> Path:
    return distpath / ("pocket.exe" if sys.platform == "win32" else "pocket")


def pyinstaller_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm", "--log-level", "WARN",
               "--distpath", str(args.distpath.resolve()), "--workpath", str(args.workpath.resolve())]
    return command + (["--clean"] if args.clean else [])


def build_env(args: argparse.Namespace) -> dict:
    """What the spec reads: CUDA or not, the generated stamp module, the kernel caches to bundle."""
    generated_dir = args.workpath.resolve() / "generated"
    staging = args.workpath.resolve() / "kernel-cache"
    kernel_cache.write_stamp_module(generated_dir)
    if args.kernel_tiers:
        started = time.perf_counter()
        kernel_cache.build_kernel_caches(args.kernel_tiers, staging, generated_dir, args.kernel_model)
        sizes = ", ".join(f"{tier} {kernel_cache.tree_bytes(staging / tier) / MIB:.1f} MiB"
                          for tier in args.kernel_tiers)
        print(f"compiled the kernels of {sizes} in {time.perf_counter() - started:.0f} s", flush=True)
    return {**os.environ, "POCKET_BUILD_CUDA": args.cuda, "POCKET_BUILD_GENERATED": str(generated_dir),
            "POCKET_BUILD_KERNEL_CACHE": str(staging), "POCKET_BUILD_KERNEL_TIERS": ",".join(args.kernel_tiers)}


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    started = time.perf_counter()
    env = build_env(args)
    completed = subprocess.run(pyinstaller_command(args), cwd=ROOT, env=env)
    if completed.returncode != 0:
        print(f"PyInstaller failed with exit code {completed.returncode}", file=sys.stderr)
        return completed.returncode
    binary = binary_path(args.distpath)
    print(f"built {binary} ({binary.stat().st_size / MIB:.1f} MiB) in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
