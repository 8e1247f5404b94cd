"""CPU tiers (kernels_numba/cpu_tier.py): which tier a CPU gets, forcing one, LLVM accepting each tier's features,
and a kernel cache built under a tier serving a fresh process on another CPU of that tier.

The subprocess tests compile a few tiny functions each (~2 s), never the kernels."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import llvmlite.binding as llvm
import pytest

from kernels_numba import cpu_tier
from kernels_numba.cpu.ir.byte_dot import target_kind
from kernels_numba.cpu_tier import CUSTOM, TIER_NAMES, best_tier, chosen_tier, tier_named

ROOT = Path(__file__).resolve().parents[2]
HASWELL = frozenset(cpu_tier._X86_64_V3)
SKYLAKE_X = HASWELL | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}  # no VNNI
CASCADE_LAKE = SKYLAKE_X | {"avx512vnni"}
ZEN4 = CASCADE_LAKE | {"avx512bf16", "avx512vbmi", "avx512ifma", "gfni", "vaes", "sha", "clzero"}
SAPPHIRE_RAPIDS = CASCADE_LAKE | {"avx512bf16", "avx512fp16", "amx-tile", "amx-int8", "amx-bf16", "avxvnni"}
ALDER_LAKE = HASWELL | {"avxvnni", "gfni", "vaes"}
SANDY_BRIDGE = frozenset({"64bit", "sse4.2", "popcnt", "avx", "cx16", "sahf"})
APPLE_M1 = frozenset({"neon", "fp-armv8", "dotprod", "fullfp16", "crc", "aes"})


@pytest.mark.parametrize("features, expected", [
    (HASWELL, "avx2"), (ALDER_LAKE, "avxvnni"), (SKYLAKE_X, "avx2"), (HASWELL - {"f16c"}, "generic"),
    (ALDER_LAKE - {"avxvnni"}, "avx2"),
    (CASCADE_LAKE, "avx512"), (ZEN4, "avx512"), (SAPPHIRE_RAPIDS, "amx"),
    (SAPPHIRE_RAPIDS - {"amx-bf16"}, "avx512"), (SANDY_BRIDGE, "generic"), (APPLE_M1, "generic"),
    (frozenset(), "generic")])
def test_tier_follows_the_cpus_features(features, expected):
    assert best_tier(features).name == expected


def test_a_tier_needs_everything_its_code_may_use():
    for tier in cpu_tier.TIERS:
        assert tier.runs_on(frozenset(tier.required))
        assert best_tier(frozenset(tier.required)) is tier


def test_forced_tier_wins_over_the_cpu():
    assert chosen_tier({"POCKET_CPU_TIER": "avx2"}, ZEN4).name == "avx2"
    assert chosen_tier({"POCKET_CPU_TIER": "amx"}, HASWELL).name == "amx"  # compiling only
    assert chosen_tier({}, ZEN4).name == "avx512"
    with pytest.raises(ValueError, match="POCKET_CPU_TIER must be one of amx, avx512, avxvnni, avx2, generic"):
        chosen_tier({"POCKET_CPU_TIER": "avx3"}, ZEN4)


def test_users_numba_cpu_name_is_respected():
    assert chosen_tier({"NUMBA_CPU_NAME": "znver4"}, ZEN4) is None
    assert chosen_tier({"NUMBA_CPU_NAME": "x86-64-v4", "NUMBA_CPU_FEATURES": "+avx512f"}, ZEN4) is None
    environ = {"NUMBA_CPU_NAME": "znver4", "POCKET_CPU_TIER": "avx2"}
    assert cpu_tier.apply_cpu_tier(environ) == CUSTOM and environ["NUMBA_CPU_NAME"] == "znver4"
    assert cpu_tier.current_tier(environ) == CUSTOM


def test_inherited_tier_settings_are_not_a_users():
    avx512 = tier_named("avx512")
    environ = {"NUMBA_CPU_NAME": avx512.cpu_name, "NUMBA_CPU_FEATURES": avx512.features, "POCKET_CPU_TIER": "avx2"}
    assert chosen_tier(environ, ZEN4).name == "avx2"
    cpu_tier.apply_cpu_tier(environ)
    assert (environ["NUMBA_CPU_NAME"], environ["NUMBA_CPU_FEATURES"]) == ("x86-64-v3", tier_named("avx2").features)
    assert cpu_tier.current_tier(environ) == "avx2" and cpu_tier.current_tier({}) == cpu_tier.NATIVE


# the integer dot instructions each tier's kernels use (ir/byte_dot.py)
BYTE_DOT_OF_TIER = {"amx": "vnni512", "avx512": "vnni512", "avxvnni": "avxvnni", "avx2": "avx2", "generic": "portable"}


def test_feature_strings_are_fixed_and_drive_the_kernels_checks():
    assert tier_named("avx2").features == (
        "+64bit,+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+cx16,+sahf,+crc32,+popcnt,+sse3,+ssse3,+sse4.1,+sse4.2,+avx,"
        "+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave,-avx512f,-amx-tile,-avxvnni")
    assert tier_named("avx512").features.endswith("+avx512vl,+avx512vnni,-amx-tile,-prefer-256-bit")
    assert tier_named("amx").features.endswith("+avx512vnni,+amx-tile,+amx-int8,+amx-bf16,-prefer-256-bit")
    assert tier_named("generic").features == "" and tier_named("generic").cpu_name == "generic"
    for tier in cpu_tier.TIERS:
        context = SimpleNamespace(codegen=lambda tier=tier: SimpleNamespace(_tm_features=tier.features))
        assert target_kind(context) == BYTE_DOT_OF_TIER[tier.name], tier.name


def child_env(tmp_path: Path, **extra: str) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "POCKET_CPU_TIER")}
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), str(tmp_path), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": pythonpath, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"), **extra}


def run_child(code: str, env: dict) -> subprocess.CompletedProcess:
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                               env=env, cwd=ROOT, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


TIER_PROBE = """
import warnings
warnings.simplefilter("ignore")  # a forced tier this CPU lacks warns: only LLVM's own output must be empty
import numpy as np
from numba import njit
from numba.core.registry import cpu_target
import kernels_numba.cpu  # every kernel module imported under the tier, nothing compiled

@njit(fastmath=True)
def total(values):
    sum = np.float32(0)
    for value in values:
        sum += value
    return sum

assert total(np.ones(1000, np.float32)) == 1000
from kernels_numba.cpu.ir.amx_tiles import HOST_COMPILES_AMX
from kernels_numba.cpu.ir.byte_dot import TARGET_KIND
print(cpu_target.target_context.codegen()._tm_features, TARGET_KIND, HOST_COMPILES_AMX, sep="|")
"""


@pytest.mark.parametrize("tier_name", TIER_NAMES)
def test_each_tier_compiles_without_llvm_warnings(tier_name, tmp_path):
    tier = tier_named(tier_name)
    completed = run_child(TIER_PROBE, child_env(tmp_path, POCKET_CPU_TIER=tier_name))
    assert completed.stderr == "", completed.stderr  # LLVM: "'+xyz' is not a recognized feature ..."
    features, byte_dot_kind, amx = completed.stdout.strip().split("|")
    assert features == tier.features
    assert (byte_dot_kind, amx) == (BYTE_DOT_OF_TIER[tier_name], str(tier_name == "amx"))


TINY_KERNEL = """
from numba import njit


@njit(cache=True)
def scaled_sum(values, scale):
    total = 0.0
    for value in values:
        total += value * scale
    return total
"""

COMPILE_COUNTER = """
import numpy as np
from numba.core import event

compiles = []


class CompileCounter(event.Listener):
    def on_start(self, ev):
        compiles.append(ev)

    def on_end(self, ev):
        pass


event.register("numba:compile", CompileCounter())
{patch}
import kernels_numba
import tiny_kernel
assert tiny_kernel.scaled_sum(np.arange(4.0), 0.5) == 3.0
print(kernels_numba.cpu_tier.current_tier(), len(compiles))
"""

# another CPU of the avx2 tier, as LLVM would report it: numba asks LLVM nothing about the host once a tier is set
AS_HASWELL = """
import llvmlite.binding as llvm
llvm.get_host_cpu_name = lambda: "haswell"
llvm.get_host_cpu_features = lambda: dict.fromkeys({features!r}, True)
"""


def test_cache_built_for_a_tier_serves_another_cpu_of_that_tier(tmp_path):
    (tmp_path / "tiny_kernel.py").write_text(TINY_KERNEL)
    build = run_child(COMPILE_COUNTER.format(patch=""), child_env(tmp_path, POCKET_CPU_TIER="avx2"))
    assert build.stdout.split() == ["avx2", "1"]
    on_haswell = COMPILE_COUNTER.format(patch=AS_HASWELL.format(features=sorted(HASWELL)))
    reuse = run_child(on_haswell, child_env(tmp_path))  # no POCKET_CPU_TIER: the "Haswell" picks avx2 itself
    assert reuse.stdout.split() == ["avx2", "0"], reuse.stdout
    indexes = list((tmp_path / "numba-cache").rglob("*.nbi"))
    assert len(indexes) == 1
    targets = {key[1] for key in read_cache_index(indexes[0])}
    avx2 = tier_named("avx2")
    assert targets == {(llvm.get_process_triple(), avx2.cpu_name, avx2.features)}
    assert llvm.get_host_cpu_name().encode() not in indexes[0].read_bytes()


def read_cache_index(path: Path) -> dict:
    """numba's .nbi: its version, then a pickle of (source stamp, {(signature, magic tuple, code hashes): file})."""
    with open(path, "rb") as f:
        pickle.load(f)
        _, overloads = pickle.loads(f.read())
    return overloads


def test_numba_imported_first_still_takes_the_tier(tmp_path):
    completed = run_child("""
        import numba
        import pocketcli.cli
        pocketcli.cli.make_parser()
        import pocketcli.engine.llm_engine
        from numba.core.registry import cpu_target
        print(cpu_target.target_context.codegen()._tm_features)
    """, child_env(tmp_path, POCKET_CPU_TIER="avx2"))
    assert completed.stdout.strip() == tier_named("avx2").features


def test_tier_set_after_numba_compiled_warns(tmp_path):
    completed = run_child("""
        import numba
        assert numba.njit(lambda x: x + 1)(1) == 2
        import kernels_numba
    """, child_env(tmp_path, POCKET_CPU_TIER="avx2"))
    assert "CpuTierWarning: numba's CPU target was made before the avx2 CPU tier was set" in completed.stderr


VNNI_PROBE = """
import warnings
warnings.simplefilter("ignore")  # the tier is for compiling only where the CPU lacks AVX-VNNI
import kernels_numba
from numba import njit, types
from kernels_numba.cpu.matvec import int8_dot

dot4 = int8_dot.dots_of_kind("Q4_0")[0]


@njit
def dots(data, quants, scales, starts, sums):
    return dot4(data, 0, 0, 0, 0, quants, scales, starts, sums, 0, 0)


dots.compile((types.Array(types.uint8, 2, "C", readonly=True), types.Array(types.int8, 2, "C"),
              types.Array(types.float32, 2, "C"), types.Array(types.int32, 2, "C"), types.Array(types.float32, 2, "C")))
print(dots.inspect_asm(dots.signatures[0]))
"""


def test_the_avxvnni_tier_uses_vex_vpdpbusd_on_256_bit_registers(tmp_path):
    """Compiled only (this CPU may lack AVX-VNNI): the 8-bit dots of the avxvnni tier are VEX-encoded vpdpbusd on
    ymm registers, with no AVX-512 instruction or register."""
    assembly = run_child(VNNI_PROBE, child_env(tmp_path, POCKET_CPU_TIER="avxvnni")).stdout
    vnni_lines = [line for line in assembly.splitlines() if "vpdpbusd" in line]
    assert vnni_lines and all("{vex}" in line and "%ymm" in line for line in vnni_lines)
    assert "zmm" not in assembly and "%k1" not in assembly


def test_cpu_vendor_reads_the_vendor_line(tmp_path):
    from kernels_numba.cpu_tier import cpu_vendor

    amd, arm = tmp_path / "amd", tmp_path / "arm"  # one file each: cpu_vendor reads a path once a process
    amd.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert cpu_vendor(str(amd)) == "AuthenticAMD"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n")  # an ARM CPU: no vendor line
    assert cpu_vendor(str(arm)) == ""
    assert cpu_vendor(str(tmp_path / "missing")) == ""


def test_one_token_prefetch_distance_follows_the_vendor_and_the_setting(monkeypatch):
    from kernels_numba.cpu.matvec import run_matvec

    monkeypatch.delenv("POCKET_DECODE_PREFETCH_BYTES", raising=False)
    monkeypatch.setattr(run_matvec, "cpu_vendor", lambda: "GenuineIntel")
    assert run_matvec.one_token_prefetch_bytes() == run_matvec.INTEL_ONE_TOKEN_PREFETCH_BYTES
    monkeypatch.setattr(run_matvec, "cpu_vendor", lambda: "AuthenticAMD")
    assert run_matvec.one_token_prefetch_bytes() == 0
    monkeypatch.setenv("POCKET_DECODE_PREFETCH_BYTES", "1024")
    assert run_matvec.one_token_prefetch_bytes() == 1024
    handles = run_matvec.run_rows_kernels(run_matvec.qt.R_Q4_0)
    assert handles.shape == (len(run_matvec.PASS_TOKENS) + 1, 2) and handles[run_matvec.PREFETCH_ROW, 0] == 1024
