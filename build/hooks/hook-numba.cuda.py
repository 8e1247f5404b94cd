"""numba.cuda, when it is part of the build (CUDA extras installed): numba-cuda and NVIDIA's CUDA libraries.

With numba-cuda installed, `numba.cuda` is served by the `numba_cuda` package; it binds the driver through
`cuda.bindings`/`cuda.core` (Cython modules that import each other from C, unseen by analysis) and finds NVVM,
libdevice, NVRTC and nvJitLink with `cuda.pathfinder`, which looks for `nvidia/cuXX/...` under every sys.path
entry: the bundle root is one, so the wheels' files keep their relative paths. The driver (libcuda) always
comes from the user's system.
"""
import importlib.util
import os

from PyInstaller.utils.hooks import collect_data_files, collect_submodules

NVIDIA_SUFFIXES = (".bc", ".h")
CYTHON_SOURCES = ["**/*.pxd", "**/*.pxi", "**/*.pyx", "**/*.pyi", "**/*.c", "**/*.cpp"]  # build-time only


def is_runtime_module(name: str) -> bool:
    return ".tests" not in name and ".simulator" not in name


def has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def nvidia_files() -> tuple[list, list]:
    """(binaries, datas) from the `nvidia` namespace package: shared libraries, libdevice, top-level headers."""
    binaries, datas = [], []
    spec = importlib.util.find_spec("nvidia") if has("nvidia") else None
    for package_dir in (spec.submodule_search_locations if spec else []):
        site_dir = os.path.dirname(package_dir)
        for dirpath, _, names in os.walk(package_dir):
            relative_dir = os.path.relpath(dirpath, site_dir)
            for name in names:
                source = os.path.join(dirpath, name)
                if ".so" in name or name.endswith(".dll"):
                    binaries.append((source, relative_dir))
                elif name.endswith(NVIDIA_SUFFIXES) and os.path.basename(dirpath) in ("include", "libdevice"):
                    datas.append((source, relative_dir))
    return binaries, datas


datas = collect_data_files("numba.cuda")
hiddenimports = collect_submodules("numba.cuda", filter=is_runtime_module)
binaries = []
if has("numba_cuda"):
    datas += collect_data_files("numba_cuda")
    hiddenimports += collect_submodules("numba_cuda", filter=is_runtime_module)
    for package in ("cuda.bindings", "cuda.core", "cuda.pathfinder"):
        if has(package):
            hiddenimports += collect_submodules(package, filter=is_runtime_module)
            datas += collect_data_files(package, excludes=CYTHON_SOURCES)
    nvidia_binaries, nvidia_datas = nvidia_files()
    binaries += nvidia_binaries
    datas += nvidia_datas
