"""The kernels a run compiled, as (module, qualname, argument types), and the same kernels compiled again for
another CPU tier without running them: how the binary gets caches for CPUs the build machine cannot run
(AVX-512 or AMX code on an AVX2 machine). Runs in a child process of kernel_cache.py, one per tier:

    python build/kernel_signatures.py record MODEL SIGNATURES    # pocket warmup, then list what compiled
    python build/kernel_signatures.py compile MODEL SIGNATURES   # compile MODEL's leaves and each signature

MODEL "" is the registry's default. Both pretend to be the frozen binary unpacked at the source root, so that its
cache locator (frozen/pocket_numba_cache.py) lays the cache out and stamps it as the binary will look for it.
`compile` takes the leaf kernels from dispatch.leaf_jobs under its own tier (which paths serve a quant type
depends on the tier) and the glue from the recorded signatures. Only numba dispatchers with cache=True that are
module attributes can be found again by name; any other cached kernel that compiled in the recording process (a
closure made by a factory, not a leaf) is reported as not replayable: a tier not recorded compiles it on first use.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "kernels_numba"
_SYS_ARCH_PRCTL = 158  # x86_64: kernels_numba/cpu/ir/amx_tiles.py asks it for the AMX tile state


@dataclass(frozen=True)
class KernelSignature:
    module: str
    qualname: str
    arg_types: tuple  # numba types (picklable)


def pretend_bundle(root: Path) -> None:
    """Make the frozen binary's cache locator and stale-cache guard see `root` as the unpacked bundle."""
    sys.frozen, sys._MEIPASS = True, str(root)


def is_cached_kernel(value) -> bool:
    """A numba dispatcher with cache=True of a function in the kernels package."""
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    return (isinstance(value, Dispatcher) and not isinstance(value._cache, NullCache)
            and value.py_func.__module__.split(".")[0] == PACKAGE)


def cached_dispatchers() -> list:
    """Every cached kernel that is a module attribute in the kernels package (once each)."""
    found = {}
    for name, module in sorted(sys.modules.items()):
        if name.split(".")[0] == PACKAGE and module is not None:
            found.update((id(value), value) for value in vars(module).values() if is_cached_kernel(value))
    return list(found.values())


def compiled_signatures() -> list[KernelSignature]:
    return [KernelSignature(d.py_func.__module__, d.py_func.__qualname__, tuple(arg_types))
            for d in cached_dispatchers() if find_dispatcher(d.py_func.__module__, d.py_func.__qualname__) is d
            for arg_types in d.overloads]


def find_dispatcher(module_name: str, qualname: str):
    """The object named qualname in the module, or None (a function made inside another has '<locals>')."""
    value = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value


def record(model: str, signatures_path: Path) -> None:
    """`pocket warmup -m model` (the registry's default model for ""; its leaf kernels and the engine's warm-up), then save what compiled."""
    from numba.core import event

    from pocketcli.cli import main

    with event.install_recorder("numba:compile") as recorder:
        if main(["warmup", *(["-m", model] if model else [])]) != 0:
            raise SystemExit("pocket warmup failed")
    signatures = compiled_signatures()
    report_unreplayable([ev.data["dispatcher"] for _, ev in recorder.buffer if ev.is_end], signatures)
    signatures_path.write_bytes(pickle.dumps(signatures))
    print(f"recorded {len(signatures)} kernel signatures", file=sys.stderr)


def report_unreplayable(compiled: list, signatures: list[KernelSignature]) -> None:
    """Name the cached kernels that compiled but cannot be found again by module and qualname."""
    replayable = {(s.module, s.qualname) for s in signatures}
    missing = sorted({f"{d.py_func.__module__}.{d.py_func.__qualname__}" for d in compiled
                      if is_cached_kernel(d) and (d.py_func.__module__, d.py_func.__qualname__) not in replayable})
    if missing:
        print(f"not replayable for other tiers (they compile on first use there): {', '.join(missing)}",
              file=sys.stderr)


def grant_amx_tile_state() -> None:
    """Building the amx tier on a CPU without AMX: amx_tiles asks Linux for the tile state at import, is refused,
    and the kernels would bake "no AMX" in; answer yes, as Linux >= 5.16 does wherever LLVM reports AMX."""
    real_cdll = ctypes.CDLL

    class GrantingLibc:
        def __init__(self, *args, **kwargs):
            self._libc = real_cdll(*args, **kwargs)

        def syscall(self, number, *args):
            return 0 if number == _SYS_ARCH_PRCTL else self._libc.syscall(number, *args)

        def __getattr__(self, name):
            return getattr(self._libc, name)

    ctypes.CDLL = GrantingLibc
    try:
        from kernels_numba.cpu.ir import amx_tiles
    finally:
        ctypes.CDLL = real_cdll
    assert amx_tiles.AMX_IS_AVAILABLE, "the amx tier's features must make amx_tiles compile AMX"


def compile_all(model: str, signatures_path: Path) -> None:
    """Compile (into numba's cache, for the tier this process has) the model's leaf kernels and every recorded
    signature, running none."""
    from kernels_numba.cpu_tier import current_tier

    if current_tier() == "amx":
        grant_amx_tile_state()
    from kernels_numba.cpu.matvec.dispatch import compile_leaf

    from pocketcli.cli import make_parser
    from pocketcli.commands.warmup import model_leaf_jobs

    leaf_jobs = model_leaf_jobs(make_parser().parse_args(["warmup", *(["-m", model] if model else [])]))
    for job in leaf_jobs:
        compile_leaf(job)
    signatures = pickle.loads(signatures_path.read_bytes())
    dispatchers = [find_dispatcher(signature.module, signature.qualname) for signature in signatures]
    compiled = [dispatcher.compile(signature.arg_types) for signature, dispatcher in zip(signatures, dispatchers)
                if is_cached_kernel(dispatcher)]  # glue a tier defines only where it has the 8-bit dots: skipped
    print(f"compiled {len(leaf_jobs)} leaf jobs and {len(compiled)} of {len(signatures)} recorded kernel "
          f"signatures for tier {current_tier()}", file=sys.stderr)


def main(argv: list[str]) -> None:
    from pocket_kernel_cache import LOCATOR_CLASSES

    os.environ["NUMBA_CACHE_LOCATOR_CLASSES"] = ",".join(LOCATOR_CLASSES)  # before numba: as the runtime hook does
    pretend_bundle(ROOT)
    if argv[0] == "record":
        record(argv[1], Path(argv[2]))
    elif argv[0] == "compile":
        compile_all(argv[1], Path(argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
