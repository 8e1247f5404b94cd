"""kernels_numba: backends are imported by name (get_ops), and numba's on-disk cache needs the .py sources.

'pyz+py' keeps the compiled modules in the archive and also ships each .py file, which numba's cache locator
and the package's stale-cache guard (a digest of the sources) read at run time. The CUDA backend is collected
when it exists and CUDA goes into the build (numba-cuda installed, POCKET_BUILD_CUDA not "off"; see pocket.spec).
"""
import importlib.util
import os

from PyInstaller.utils.hooks import collect_submodules


def with_cuda() -> bool:
    return os.environ.get("POCKET_BUILD_CUDA") != "off" and importlib.util.find_spec("numba_cuda") is not None


def include(name: str) -> bool:
    return with_cuda() or not name.startswith("kernels_numba.cuda")


hiddenimports = collect_submodules("kernels_numba", filter=include)
module_collection_mode = "pyz+py"
