"""numba (replaces the hooks-contrib hook, keeping what it does): llvmlite, cloudpickle's fast path, and the C
extensions that other C extensions import (`_dispatcher` needs `_devicearray`) or that are picked by name at
run time (the threading layers: workqueue and OpenMP always, TBB only when libtbb is installed).

CUDA is added by hook-numba.cuda.py only when `numba.cuda` is part of the build (numba-cuda installed).
"""
import importlib.util

from PyInstaller.utils.hooks import is_module_satisfies

excludedimports = ["IPython", "scipy", "numba.tests"]
hiddenimports = [
    "llvmlite", "llvmlite.binding",
    "numba._devicearray", "numba._dispatcher", "numba._dynfunc", "numba._helperlib", "numba.mviewbuf",
    "numba.core.runtime._nrt_python", "numba.core.typeconv._typeconv", "numba.experimental.jitclass._box",
    "numba.np.ufunc._internal", "numba.np.ufunc._num_threads", "numba.np.ufunc.workqueue",
    "numba.np.ufunc.omppool",
]
if importlib.util.find_spec("tbb") is not None:
    hiddenimports += ["numba.np.ufunc.tbbpool"]
if is_module_satisfies("numba >= 0.59.0"):
    hiddenimports += ["numba.cloudpickle.cloudpickle_fast"]
