"""The CPU tier the kernels compile for: one fixed LLVM CPU name and feature string per family of CPUs.

numba keys its on-disk cache by the exact target it compiled for (triple, CPU name, feature string: the "magic
tuple"), so kernels compiled on one host never serve another and a fresh install compiles for minutes. With a
tier's name and features in NUMBA_CPU_NAME / NUMBA_CPU_FEATURES every CPU of the tier compiles the same code, and
a cache built on one of them (by `pocket warmup`, or shipped in the binary) serves them all.

Tiers, best first: amx (Sapphire Rapids and later), avx512 (AVX-512 F/BW/CD/DQ/VL + VNNI: Cascade Lake, Ice Lake,
Zen 4 and later), avxvnni (x86-64-v3 + AVX-VNNI: Alder Lake and later laptops and desktops), avx2 (x86-64-v3:
Haswell, Zen 1 and later), generic (anything else: Arm, older x86).
POCKET_CPU_TIER=<tier> forces one; a tier this CPU lacks is for compiling only (its code would not run here).
A NUMBA_CPU_NAME the user set wins: the tier is then "custom". Nothing here imports numba: the settings must be
in the environment before numba reads them (numba.core.config, at import; reloaded here if it came first).
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from dataclasses import dataclass

TIER_ENV = "POCKET_CPU_TIER"
CPU_NAME_ENV = "NUMBA_CPU_NAME"
CPU_FEATURES_ENV = "NUMBA_CPU_FEATURES"
CUSTOM = "custom"  # NUMBA_CPU_NAME set by the user
NATIVE = "native"  # no tier applied (yet): numba compiles for this exact CPU

# x86-64-v3 as LLVM defines it, spelt as LLVM reports host features (no x87/nopl: never reported, implied by name)
_X86_64_V3 = ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "cx16", "sahf", "crc32", "popcnt", "sse3",
              "ssse3", "sse4.1", "sse4.2", "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_AVX512 = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512vnni")
_AMX = ("amx-tile", "amx-int8", "amx-bf16")
# x86-64-v4 tunes like Skylake-X, which halves auto-vectorised loops to 256 bits; the kernels were measured with
# 512-bit loops (native znver4): keep them
_FULL_WIDTH = ("prefer-256-bit",)


class CpuTierWarning(RuntimeWarning):
    """The tier cannot take effect as asked (numba compiled already), or its code cannot run on this CPU."""


@dataclass(frozen=True)
class CpuTier:
    name: str
    cpu_name: str  # NUMBA_CPU_NAME: a generic LLVM model, so no CPU-specific extension comes in by name
    required: tuple[str, ...]  # what the CPU must have: all the code may use
    switched_off: tuple[str, ...]  # named off (features, tunings) whatever LLVM would infer
    summary: str

    @property
    def features(self) -> str:
        """NUMBA_CPU_FEATURES: fixed, the same string on every CPU of the tier."""
        return ",".join([f"+{name}" for name in self.required] + [f"-{name}" for name in self.switched_off])

    def runs_on(self, host_features: frozenset[str]) -> bool:
        return set(self.required) <= host_features


TIERS = (  # best first
    CpuTier("amx", "x86-64-v4", _X86_64_V3 + _AVX512 + _AMX, _FULL_WIDTH, "AVX-512 + VNNI + AMX int8/bf16"),
    CpuTier("avx512", "x86-64-v4", _X86_64_V3 + _AVX512, ("amx-tile",) + _FULL_WIDTH, "AVX-512 F/BW/CD/DQ/VL + VNNI"),
    CpuTier("avxvnni", "x86-64-v3", _X86_64_V3 + ("avxvnni",), ("avx512f", "amx-tile"),
            "AVX2 + AVX-VNNI (256-bit vpdpbusd) without AVX-512"),
    CpuTier("avx2", "x86-64-v3", _X86_64_V3, ("avx512f", "amx-tile", "avxvnni"), "AVX2 + FMA + F16C + BMI2"),
    CpuTier("generic", "generic", (), (), "the architecture's baseline"),
)
TIER_NAMES = tuple(tier.name for tier in TIERS)


def tier_named(name: str) -> CpuTier:
    for tier in TIERS:
        if tier.name == name:
            return tier
    raise ValueError(f"{TIER_ENV} must be one of {', '.join(TIER_NAMES)}; got {name!r}")


def best_tier(host_features: frozenset[str]) -> CpuTier:
    """The best tier whose code runs on a CPU with these (LLVM-named) features; generic always does."""
    return next(tier for tier in TIERS if tier.runs_on(host_features))


def tier_of_settings(cpu_name: str | None, features: str | None) -> CpuTier | None:
    """The tier whose NUMBA_CPU_NAME/NUMBA_CPU_FEATURES these are (a parent process's choice, inherited)."""
    return next((tier for tier in TIERS if (tier.cpu_name, tier.features) == (cpu_name, features or "")), None)


def has_user_cpu_setting(environ) -> bool:
    cpu_name = environ.get(CPU_NAME_ENV) or None
    return cpu_name is not None and tier_of_settings(cpu_name, environ.get(CPU_FEATURES_ENV)) is None


def chosen_tier(environ, host_features: frozenset[str]) -> CpuTier | None:
    """POCKET_CPU_TIER's tier, else the best one this CPU runs; None when the user set NUMBA_CPU_NAME."""
    if has_user_cpu_setting(environ):
        return None
    forced = environ.get(TIER_ENV, "").strip()
    return tier_named(forced) if forced else best_tier(host_features)


def host_features() -> frozenset[str]:
    """This CPU's features as LLVM names them (what the OS enables too: no AVX-512 without its register state)."""
    import llvmlite.binding as llvm  # loads LLVM, not numba

    try:
        return frozenset(name for name, enabled in llvm.get_host_cpu_features().items() if enabled)
    except RuntimeError:  # LLVM cannot tell on this platform: the baseline runs everywhere
        return frozenset()


@functools.lru_cache(maxsize=None)
def cpu_vendor(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor string as the kernel reports it ("GenuineIntel", "AuthenticAMD"), "" where unknown (no
    /proc/cpuinfo, an ARM CPU); read once a process (each run code's leaf handles ask for it)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as cpuinfo:
            line = next((line for line in cpuinfo if line.startswith("vendor_id")), "")
    except OSError:
        return ""
    return line.partition(":")[2].strip()


def current_tier(environ=os.environ) -> str:
    """The tier numba's settings in the environment name: a tier, "custom", or "native" when none is applied."""
    cpu_name = environ.get(CPU_NAME_ENV) or None
    if cpu_name is None:
        return NATIVE
    tier = tier_of_settings(cpu_name, environ.get(CPU_FEATURES_ENV))
    return tier.name if tier else CUSTOM


def apply_cpu_tier(environ=os.environ) -> str:
    """Put the chosen tier's CPU name and features where numba reads them; the tier's name, or "custom"."""
    features = host_features()
    tier = chosen_tier(environ, features)
    if tier is None:
        return CUSTOM
    environ[CPU_NAME_ENV], environ[CPU_FEATURES_ENV] = tier.cpu_name, tier.features
    if not tier.runs_on(features):
        missing = ", ".join(sorted(set(tier.required) - features))
        warnings.warn(f"{TIER_ENV}={tier.name}: this CPU lacks {missing}; the kernels compile for it but would "
                      "crash here (illegal instruction)", CpuTierWarning, stacklevel=2)
    if environ is os.environ and "numba.core.config" in sys.modules:
        sys.modules["numba.core.config"].reload_config()
        warn_if_compiled_already(tier)
    return tier.name


def compiled_features() -> str | None:
    """The feature string numba's CPU code generator was made with, when it exists already (it reads its settings
    once; its CPU name is read again on every call, so only the features tell what it compiles for)."""
    registry = sys.modules.get("numba.core.registry")
    context = vars(registry.cpu_target).get("_toplevel_target_context") if registry else None
    return None if context is None else context.codegen()._tm_features


def warn_if_compiled_already(tier: CpuTier) -> None:
    features = compiled_features()
    if features is not None and features != tier.features:
        warnings.warn(f"numba's CPU target was made before the {tier.name} CPU tier was set: the kernels compile "
                      "for this exact CPU and their cache serves it only; import kernels_numba before compiling "
                      "with numba", CpuTierWarning, stacklevel=3)
