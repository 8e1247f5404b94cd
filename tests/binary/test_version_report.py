"""`pocket --version` in the Python install: version, CPU/CUDA backends, numba cache dir (fast; no binary)."""
import importlib.util
import os
import sys
import tomllib
from pathlib import Path

import llvmlite.binding as llvm

from pocketcli import version_report
from pocketcli.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_flag_prints_report(capsys):
    assert main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert lines[0] == f"pocket {version} (Python install)"
    assert any(line.startswith("CPU: available: ") and llvm.get_host_cpu_name() in line for line in lines)
    assert any(line.startswith("CUDA: ") for line in lines)
    assert lines[-1].startswith("numba cache: ")


def test_cache_dir_is_where_numba_caches_the_kernels():
    from kernels_numba.cpu import norm

    cached = [value for value in vars(norm).values() if getattr(value, "_cache", None) is not None]
    assert cached and version_report.numba_cache_dir() == cached[0]._cache._cache_path


def test_cpu_features_are_the_hosts():
    enabled = {name for name, on in llvm.get_host_cpu_features().items() if on}
    features = version_report.cpu_features()
    assert set(features) <= enabled and set(features) == enabled & set(version_report.SIMD_FEATURES)


def test_cuda_reason_without_numba_cuda(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba_cuda" else real_find_spec(name, *a))
    assert version_report.cuda_report() == (
        f"CUDA: not available (numba-cuda is not installed: {version_report.CUDA_INSTALL_HINT})",)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert version_report.cuda_report() == ("CUDA: not available (this binary was built without CUDA support)",)


def test_cpu_tier_line_names_the_tier_and_who_chose_it(capsys):
    from kernels_numba import cpu_tier

    assert main(["--version"]) == 0
    tier = cpu_tier.chosen_tier(os.environ, cpu_tier.host_features())  # the host's, unless the run forces one
    assert f"CPU tier: {tier.name} ({tier.cpu_name}: " in capsys.readouterr().out
    avx2 = cpu_tier.tier_named("avx2")
    forced = {"POCKET_CPU_TIER": "avx2", "NUMBA_CPU_NAME": avx2.cpu_name, "NUMBA_CPU_FEATURES": avx2.features}
    assert version_report.describe_cpu_tier(forced) == (
        "avx2 (x86-64-v3: AVX2 + FMA + F16C + BMI2; forced by POCKET_CPU_TIER)")
    assert version_report.describe_cpu_tier({"NUMBA_CPU_NAME": "znver3"}) == (
        "custom (NUMBA_CPU_NAME=znver3 set by the user)")
