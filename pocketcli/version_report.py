"""`pocket --version`: the version, the compute backends this install can use, and where compiled kernels go.

The same report for the Python install and the frozen binary; nothing here compiles a kernel or needs a GPU,
nor imports the kernels (kernels_numba.cpu) or, without an NVIDIA driver, numba.cuda: each takes a second.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

DISTRIBUTION = "pocketllm"
# SIMD features the kernels can use (x86 and Arm); the full LLVM list is long and mostly noise
SIMD_FEATURES = ("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni",
                 "avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "amx-bf16", "amx-int8",
                 "neon", "dotprod", "fullfp16", "bf16", "i8mm", "sve", "sve2")
CUDA_INSTALL_HINT = "pip install 'numba-cuda[cu13]'"
GIB = 1 << 30


@dataclass(frozen=True)
class VersionReport:
    version: str
    python: str
    numba: str
    llvmlite: str
    executable: str  # the frozen binary, or "" for the Python install
    cpu_name: str
    cpu_features: tuple[str, ...]
    cpu_threads: int
    cpu_tier: str  # what the kernels compile for (kernels_numba/cpu_tier.py) and why
    cuda_lines: tuple[str, ...]
    numba_cache_dir: str


def make_version_report() -> VersionReport:
    import llvmlite
    import numba

    return VersionReport(version=package_version(), python=platform.python_version(), numba=numba.__version__,
                         llvmlite=llvmlite.__version__, executable=frozen_executable(), cpu_name=cpu_name(),
                         cpu_features=cpu_features(), cpu_threads=numba.config.NUMBA_NUM_THREADS,
                         cpu_tier=describe_cpu_tier(), cuda_lines=cuda_report(), numba_cache_dir=numba_cache_dir())


def format_version_report(report: VersionReport) -> str:
    build = f"one-file binary {report.executable}" if report.executable else "Python install"
    features = " ".join(report.cpu_features) or "none of the SIMD extensions the kernels use"
    lines = [f"pocket {report.version} ({build})",
             f"Python {report.python}, numba {report.numba}, llvmlite {report.llvmlite}",
             f"CPU: available: {report.cpu_name}, {report.cpu_threads} threads; features: {features}",
             f"CPU tier: {report.cpu_tier}",
             *report.cuda_lines,
             f"numba cache: {report.numba_cache_dir}"]
    return "\n".join(lines)


def package_version() -> str:
    """From the installed metadata, else from the pyproject.toml of a source checkout (or bundled beside it)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return tomllib.load(f)["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def frozen_executable() -> str:
    return sys.executable if getattr(sys, "frozen", False) else ""


def cpu_name() -> str:
    """This CPU as LLVM names it (what numba compiles for is the tier's CPU name: describe_cpu_tier)."""
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def describe_cpu_tier(environ=os.environ) -> str:
    """'avx512 (x86-64-v4: AVX-512 ...; picked from this CPU)': the tier numba's settings name, and who chose it."""
    from kernels_numba import cpu_tier  # the light package sets the tier (no kernels, no numba)

    name = cpu_tier.current_tier(environ)
    if name == cpu_tier.CUSTOM:
        return f"custom (NUMBA_CPU_NAME={environ[cpu_tier.CPU_NAME_ENV]} set by the user)"
    if name == cpu_tier.NATIVE:
        return "none (numba compiles for this exact CPU)"
    tier = cpu_tier.tier_named(name)
    chooser = f"forced by {cpu_tier.TIER_ENV}" if environ.get(cpu_tier.TIER_ENV) else "picked from this CPU"
    return f"{tier.name} ({tier.cpu_name}: {tier.summary}; {chooser})"


def cpu_features() -> tuple[str, ...]:
    import llvmlite.binding as llvm

    enabled = {name for name, on in llvm.get_host_cpu_features().items() if on}
    return tuple(name for name in SIMD_FEATURES if name in enabled)


def cuda_report() -> tuple[str, ...]:
    """'CUDA: N device(s)' lines, or one 'CUDA: not available (reason)' line."""
    reason = cuda_missing_reason()
    if reason:
        return (f"CUDA: not available ({reason})",)
    from numba import cuda

    devices = [describe_device(index, device) for index, device in enumerate(cuda.gpus)]
    return (f"CUDA: available, {len(devices)} device(s); {toolkit_summary()}", *devices)


def cuda_missing_reason() -> str:
    from .device import has_nvidia_driver

    if importlib.util.find_spec("numba_cuda") is None:
        if getattr(sys, "frozen", False):
            return "this binary was built without CUDA support"
        return f"numba-cuda is not installed: {CUDA_INSTALL_HINT}"
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if not (simulated or has_nvidia_driver()):  # answers in milliseconds, without importing numba.cuda
        return "no NVIDIA driver found"
    try:
        from numba import config
        from numba.cuda.cudadrv.driver import driver
    except Exception as exc:  # a broken CUDA install must not break --version
        return f"numba.cuda failed to import: {one_line(exc)}"
    if config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM=1 selects the simulator"
    if not driver.is_available:
        return f"no usable NVIDIA driver: {one_line(driver.initialization_error)}; {toolkit_summary()}"
    return ""


def toolkit_summary() -> str:
    """Whether kernels could be compiled: NVVM (and libdevice) found, with its version."""
    try:
        from numba.cuda.cudadrv.nvvm import NVVM

        major, minor = NVVM().get_version()
    except Exception as exc:
        return f"NVVM not found: {one_line(exc)}"
    return f"NVVM {major}.{minor}"


def describe_device(index: int, device) -> str:
    try:
        with device:
            from numba import cuda

            _, total_bytes = cuda.current_context().get_memory_info()
            major, minor = device.compute_capability
            name = device.name.decode() if isinstance(device.name, bytes) else device.name
    except Exception as exc:  # e.g. a device another process holds exclusively
        return f"  cuda:{index} could not be queried: {one_line(exc)}"
    return f"  cuda:{index} {name}, compute capability {major}.{minor}, {total_bytes / GIB:.0f} GiB"


def numba_cache_dir() -> str:
    """Where numba keeps the compiled CPU kernels: asked of numba's own cache locator for one of our kernels."""
    from numba.core import config

    cache_path = kernel_cache_path()
    if cache_path:
        return cache_path
    return config.CACHE_DIR or "none (kernels compile on every run: no writable cache location)"


def kernel_cache_path() -> str:
    """The cache dir numba's locators pick for a function in kernels_numba/cpu/, asked with a stand-in function
    there: importing the kernels themselves would take seconds."""
    import kernels_numba  # the light package: get_ops, no kernels
    from numba.core.caching import CompileResultCacheImpl

    stand_in = stand_in_function(os.path.join(os.path.dirname(kernels_numba.__file__), "cpu", "__init__.py"))
    try:
        return CompileResultCacheImpl(stand_in).locator.get_cache_path()
    except RuntimeError:  # no locator: no writable cache location
        return ""


def stand_in_function(py_file: str):
    """An empty function that says it was defined in py_file (numba's locators go by the function's file)."""
    namespace: dict = {}
    exec(compile("def kernel():\n    pass\n", py_file, "exec"), namespace)
    return namespace["kernel"]


def one_line(message) -> str:
    return " ".join(str(message).split())


def print_version_report() -> int:
    print(format_version_report(make_version_report()))
    return 0
