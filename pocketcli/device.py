"""Which device runs the kernels: `--device auto|cpu|cuda` (auto = CUDA when a usable GPU is present)."""
from __future__ import annotations

import os

DEVICES = ("auto", "cpu", "cuda")


class DeviceUnavailableError(ValueError):
    """CUDA was asked for and cannot be used (a user error: one line, exit code 2)."""


def cuda_problem() -> str | None:
    """Why CUDA cannot run here, or None when it can (NUMBA_ENABLE_CUDASIM=1 counts as a simulated GPU)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return None
    if not has_nvidia_driver():  # answers in milliseconds; importing numba.cuda takes about a second
        return "no NVIDIA driver found"
    try:
        import kernels_numba  # noqa: F401  (narrows numba-cuda's import hook before numba.cuda loads)
        from numba import cuda
    except ImportError:
        return "numba-cuda is not installed (pip install 'pocketllm[cuda]')"
    try:
        if cuda.is_available():
            return None
    except Exception as exc:  # a broken driver install raises instead of answering
        return f"the CUDA driver failed to load ({exc})"
    return "no usable NVIDIA GPU or driver found"


def has_nvidia_driver() -> bool:
    """Whether an NVIDIA driver is loaded (Linux: /proc/driver/nvidia; WSL: /dev/dxg) or libcuda is findable."""
    import ctypes.util

    return (os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/dxg")
            or ctypes.util.find_library("cuda") is not None)


def resolve_device(requested: str) -> str:
    """`cpu` or `cuda` for a --device value; raises DeviceUnavailableError when cuda is required but absent."""
    if requested not in DEVICES:
        raise DeviceUnavailableError(f"--device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    problem = cuda_problem()
    if problem is None:
        return "cuda"
    if requested == "cuda":
        raise DeviceUnavailableError(f"--device cuda: {problem}")
    return "cpu"


def backend_for(device: str, cpu_backend: str) -> str:
    """The kernel backend (kernels_numba.get_ops name) of a resolved device."""
    return "cuda" if device == "cuda" else cpu_backend


def describe_device(device: str) -> dict:
    """Name and memory of the device, for `pocket info` (the CPU reports only its name)."""
    if device != "cuda" or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return {"device": device}
    from numba import cuda

    gpu = cuda.get_current_device()
    free, total = cuda.current_context().get_memory_info()
    name = gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name)
    return {"device": "cuda", "gpu": name, "compute_capability": "%d.%d" % gpu.compute_capability,
            "gpu_memory_total_bytes": int(total), "gpu_memory_free_bytes": int(free)}
