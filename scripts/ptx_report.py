"""Per CUDA kernel: registers, spills and shared memory for each architecture (numba compile_ptx + ptxas -v).

Usage: python scripts/ptx_report.py [--arch sm_90 ...]. Needs numba-cuda and a ptxas (CUDA toolkit, or the
nvidia-cuda-nvcc wheel); no GPU. When ptxas is older than the PTX ISA that NVVM wrote, the .version line is
lowered to what ptxas accepts (the kernels use no newer instructions) and the report says so.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels_numba.cuda.ptx import ARCHITECTURES, KERNEL_SIGNATURES, kernel_ptx  # noqa: E402

UNSUPPORTED_VERSION = re.compile(r"Unsupported \.version ([\d.]+); current version is '([\d.]+)'")


def ptxas_info(ptxas: str, ptx: str, arch: str) -> tuple[str, str | None]:
    """ptxas -v's report for `ptx`, and the PTX version it was lowered to (None when not needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        command = [ptxas, "-v", f"-arch={arch}", str(source), "-o", str(Path(tmp) / "kernel.cubin")]
        result = subprocess.run(command, capture_output=True, text=True)
        match = UNSUPPORTED_VERSION.search(result.stderr)
        if match is None:
            return result.stderr, None
        source.write_text(re.sub(r"^\.version [\d.]+", f".version {match.group(2)}", ptx, count=1, flags=re.M))
        return subprocess.run(command, capture_output=True, text=True).stderr, match.group(2)


def summary(report: str) -> str:
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    stack = re.search(r"(\d+) bytes stack frame", report)
    smem = re.search(r"(\d+) bytes smem", report)
    if registers is None:
        return "ptxas failed: " + " | ".join(line for line in report.splitlines() if "error" in line.lower())[:200]
    return (f"{registers.group(1):>4} regs  spill st/ld {spills.group(1) if spills else 0}/"
            f"{spills.group(2) if spills else 0} B  stack {stack.group(1) if stack else 0} B  "
            f"smem {smem.group(1) if smem else 0} B")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", help="e.g. sm_90 (default: sm_80 sm_86 sm_89 sm_90)")
    args = parser.parse_args()
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        print("ptxas not found: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`", file=sys.stderr)
        return 2
    archs = [tuple(int(c) for c in a.removeprefix("sm_")) for a in args.arch] if args.arch else ARCHITECTURES
    lowered = set()
    for name in KERNEL_SIGNATURES:
        for cc in archs:
            arch = "sm_%d%d" % cc
            report, version = ptxas_info(ptxas, kernel_ptx(name, cc), arch)
            lowered.add(version)
            print(f"{name:<16} {arch}  {summary(report)}")
    if lowered - {None}:
        print(f"note: PTX .version lowered to {', '.join(sorted(lowered - {None}))} for {ptxas}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
