"""A warm start loads kernels without readying numba for compiles (kernels_numba/numba_cache_load.py, nrt_cache.py):
no registry refresh, each kernel's bitcode parsed only when a compile links it, the runtime (NRT) from its saved
object code; a compile after such loads still links and runs. Fresh processes on a tiny kernel file and a
temporary NUMBA_CACHE_DIR (two small compiles, ~2 s a process)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm

from kernels_numba import nrt_cache
from kernels_numba.object_symbols import defined_symbols

TINY_KERNELS = """
import numpy as np
from numba import njit

@njit(cache=True)
def ones_plus(x):
    return np.ones(3) + x  # allocates: calls numba's runtime
"""

CHILD = """
import json, sys
from pathlib import Path
from kernels_numba.numba_cache_load import install_lean_cache_loads
from kernels_numba.nrt_cache import install_nrt_cache
install_lean_cache_loads()
install_nrt_cache(Path(sys.argv[1]))
from numba import njit
from numba.core.runtime import rtsys
import tiny_kernels

loaded = tiny_kernels.ones_plus(2.0).tolist()
library = tiny_kernels.ones_plus.overloads[tiny_kernels.ones_plus.signatures[0]].library
report = {"value": loaded, "registries_loaded": "numba.np.linalg" in sys.modules,
          "bitcode_deferred": getattr(library, "_unparsed_bitcode", None) is not None,
          "nrt_from_cache": getattr(rtsys.library, "_unparsed_bitcode", None) is not None}

@njit
def twice(x):  # compiled here: links the loaded kernel and the runtime
    return 2 * tiny_kernels.ones_plus(x)

report["linked_value"] = twice(1.0).tolist()
report["registries_after_compile"] = "numba.np.linalg" in sys.modules
print(json.dumps(report))
"""


def run_child(tmp_path: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    completed = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "nrt")], capture_output=True,
                               text=True, timeout=300, env=env)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


def test_warm_load_skips_the_compile_setup_and_a_later_compile_still_links(tmp_path):
    (tmp_path / "tiny_kernels.py").write_text(TINY_KERNELS)
    cold = run_child(tmp_path)  # compiles ones_plus and the runtime, saving both
    assert cold["value"] == [3.0, 3.0, 3.0] and cold["registries_loaded"] and not cold["nrt_from_cache"]
    assert [path.name.startswith(nrt_cache.FILE_PREFIX) for path in (tmp_path / "nrt").iterdir()] == [True]

    warm = run_child(tmp_path)
    assert warm["value"] == [3.0, 3.0, 3.0]
    assert not warm["registries_loaded"] and warm["bitcode_deferred"] and warm["nrt_from_cache"]
    assert warm["linked_value"] == [4.0, 4.0, 4.0] and warm["registries_after_compile"]


def test_object_symbols_name_what_the_bitcode_defines():
    """The names read from the object code cover every symbol of the bitcode another library could look up (the
    non-private definitions); numba's runtime library is the example."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target
    from numba.core.runtime import nrtdynmod

    with global_compiler_lock:
        ir_module, library = nrtdynmod.create_nrt_module(cpu_target.target_context)
        library.enable_object_caching()
        library.add_ir_module(ir_module)
        library.finalize()
        _, _, (object_code, bitcode) = library.serialize_using_object_code()
    module = llvm.parse_bitcode(bitcode)
    expected = {value.name for values in (module.functions, module.global_variables) for value in values
                if not value.is_declaration and value.linkage != llvm.Linkage.private}
    assert "NRT_incref" in expected and expected <= defined_symbols(object_code)
    assert defined_symbols(b"\xcf\xfa\xed\xfe" + bytes(60)) is None  # not ELF (Mach-O): numba parses the bitcode


def test_unusable_runtime_file_is_compiled_again(tmp_path):
    from numba.core.registry import cpu_target

    path = tmp_path / "nrt-broken.nbo"
    path.write_bytes(b"not a pickle")
    assert nrt_cache.load_nrt_library(cpu_target.target_context.codegen(), path) is None
    assert nrt_cache.load_nrt_library(cpu_target.target_context.codegen(), tmp_path / "absent.nbo") is None
