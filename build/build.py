"""Build the one-file `pocket` binary with PyInstaller and print its size.

    python build/build.py [--distpath dist] [--workpath .pyinstaller-work] [--cuda auto|on|off] [--clean]

PyInstaller's work files go to .pyinstaller-work/ (its default, ./build, is this source directory).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

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
    return parser


def binary_path(distpath: Path) -> Path:
    return distpath / ("pocket.exe" if sys.platform == "win32" else "pocket")


def pyinstaller_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm", "--log-level", "WARN",
               "--distpath", str(args.distpath.resolve()), "--workpath", str(args.workpath.resolve())]
    return command + (["--clean"] if args.clean else [])


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    started = time.perf_counter()
    env = {**os.environ, "POCKET_BUILD_CUDA": args.cuda}
    completed = subprocess.run(pyinstaller_command(args), cwd=ROOT, env=env)
    if completed.returncode != 0:
        print(f"PyInstaller failed with exit code {completed.returncode}", file=sys.stderr)
        return completed.returncode
    binary = binary_path(args.distpath)
    print(f"built {binary} ({binary.stat().st_size / MIB:.1f} MiB) in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
