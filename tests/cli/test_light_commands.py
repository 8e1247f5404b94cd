"""Cheap commands stay cheap: `pocket --help`, `--version`, `list`, `info` and `tokenize` never import numba's
compiler stack through the kernels (kernels_numba.cpu), each run in a fresh interpreter."""
import json
import subprocess
import sys

import pytest

from pocketcli.device import has_nvidia_driver
from pocketcli.errors import USER_ERRORS

CHILD = """
import json, sys
from pocketcli.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(name for name in sys.modules
                        if name.split(".")[0] in ("numba", "kernels_numba", "numpy", "gguf", "llvmlite", "asyncio"))))
"""
# `info` describes the GPU when there is one (numba.cuda): the CPU is what this test is about
DEVICE_CPU = ["--device", "cpu"] if has_nvidia_driver() else []


def is_kernels(name: str) -> bool:
    """kernels_numba.cpu and its modules (kernels_numba.cpu_tier, which loads no numba, is not one)."""
    return name.split(".")[:2] == ["kernels_numba", "cpu"]


def imported_modules(*args: str) -> list[str]:
    completed = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["list"], ["info", *DEVICE_CPU], ["tokenize", "Hello world"]],
                         ids=["help", "list", "info", "tokenize"])
def test_command_does_not_import_numba(args):
    modules = imported_modules(*args)
    assert not [name for name in modules if name.split(".")[0] == "numba" or is_kernels(name)]


def test_help_imports_no_numpy_gguf_or_llvm():
    """`pocket --help` builds every command's flags from the settings' fields, and nothing heavier: 0.23-0.26 s
    of wall on a loaded 2-core AMD EPYC (0.35-0.41 s when it imported numpy, gguf-py and llvmlite)."""
    assert imported_modules("--help") == []


ENGINE_CHILD = """
import json, sys
import pocketcli.commands.generate, pocketcli.engine.llm_engine  # what generate imports before the model: the
# engine, numba, the kernels (the KV row codecs load from numba's cache here)
print(json.dumps(sorted(sys.modules)))
"""
# what numba imports to compile (its registry refresh) and asyncio (the chat app and the server await the engine)
COMPILE_ONLY_MODULES = ("numba.np.linalg", "numba.typed.typeddict", "numba.np.random.generator_core", "asyncio")


def test_generate_loads_its_kernels_without_numbas_compiler_registries():
    """A warm generate loads kernels from numba's cache without numba's compile set-up (the registries: 0.3-0.45 s
    and 13 MB of a start, kernels_numba/numba_cache_load.py) and without asyncio. The first child warms the
    cache where it is cold (it then compiles the two KV row codecs)."""
    for _ in range(2):
        completed = subprocess.run([sys.executable, "-c", ENGINE_CHILD], capture_output=True, text=True, timeout=600)
        assert completed.returncode == 0, completed.stderr
    modules = set(json.loads(completed.stdout.splitlines()[-1]))
    assert "kernels_numba.cpu.kv_row" in modules
    assert not [name for name in COMPILE_ONLY_MODULES if name in modules]


def test_version_reports_numba_without_the_kernels():
    """--version reports numba's own settings (threads, cache dir: asked of numba), so numba loads; the kernels
    and, without an NVIDIA driver, numba.cuda do not."""
    modules = imported_modules("--version")
    assert "numba" in modules and not [name for name in modules if is_kernels(name)]
    if not has_nvidia_driver():
        assert "numba.cuda" not in modules


def test_user_errors_cover_the_errors_of_the_heavy_modules():
    """errors.py imports neither the engine nor gguf_loader: their errors are ValueErrors, which USER_ERRORS holds."""
    from gguf_loader import ModelFileError, UnsupportedModelError
    from pocketcli.device import DeviceUnavailableError
    from pocketcli.engine.llm_engine import PromptTooLongError

    for error in (ModelFileError, UnsupportedModelError, DeviceUnavailableError, PromptTooLongError):
        assert issubclass(error, USER_ERRORS)
