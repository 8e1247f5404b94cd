"""The three backends export the same ops with the same parameters; what one backend has beyond the others is
listed here by name, so a new op added to one backend only fails until it is added to the others (issue 27).

kernels_numba.cuda imports without a GPU (numba-cuda needs a device only to launch), so this runs everywhere.
"""
import inspect
import types

import pytest

from kernels_numba import get_ops

# Every op is in every backend (issue 27): the glue between ops (add, scale, split_columns, concat_*...), memory
# (to_device, to_host, zeros...) and top-k are numpy on the host (kernels_numba/host_arrays.py) and kernels on cuda.
CUDA_ONLY: set[str] = set()
# The fused decode layer is a CPU speed path, not an op with a meaning of its own: the model asks for it with
# hasattr (models/base.py _decode_plans) and runs the same layer op by op without it; tensor parallelism hides it
# (parallel/parallel_ops.py FUSED_LAYER_OPS), as no collective fits inside one compiled layer. decode_layers runs
# every fused layer of a step in one call (kernels_numba/cpu/decode_stack.py), the same way; compile_decode_step
# compiles what decode_layers compiles, from the weights' types, for a first run's side and tail children
# (pocketcli/commands/first_run.py).
CPU_ONLY = {"decode_layer", "decode_layers", "compile_decode_step", "plan_decode_layer"}
REFERENCE_ONLY: set[str] = set()


def ops(module) -> dict:
    """The functions a backend module offers: public callables of kernels_numba, classes and modules left out."""
    found = {}
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("_") or isinstance(value, (types.ModuleType, type)) or not callable(value):
            continue
        if str(getattr(value, "__module__", "")).startswith("kernels_numba"):
            found[name] = value
    return found


def parameters(function) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults (annotations may be strings in one module and types in another)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.fixture(scope="module")
def backends():
    pytest.importorskip("numba.cuda")
    return {name: ops(get_ops(name)) for name in ("reference", "cpu", "cuda")}


def test_every_backend_has_the_shared_op_set(backends):
    extras = {"reference": REFERENCE_ONLY, "cpu": CPU_ONLY, "cuda": CUDA_ONLY}
    shared = set(backends["reference"]) - REFERENCE_ONLY
    for name, found in backends.items():
        assert set(found) - extras[name] == shared, (name, sorted(set(found) ^ (shared | extras[name])))


def test_shared_ops_take_the_same_parameters(backends):
    for name in set(backends["reference"]) - REFERENCE_ONLY:
        assert parameters(backends["cpu"][name]) == parameters(backends["reference"][name]), name
        assert parameters(backends["cuda"][name]) == parameters(backends["reference"][name]), name


def test_every_backend_lists_its_supported_types(backends):
    for name in ("reference", "cpu", "cuda"):
        assert get_ops(name).SUPPORTED_TYPES, name
