"""The CPU kernels that a step calls from Python run without the GIL, so the server's event loop (HTTP reads, SSE
writes: each socket write takes the GIL back after its syscall) runs beside them instead of waiting for a whole
decode stack (~10-20 ms for SmolLM2 at 8 sequences, far longer for bigger models)."""
import importlib
import pkgutil

import pytest
from numba.core.registry import CPUDispatcher

import kernels_numba.cpu
from kernels_numba.cpu.decode_layer import decode_layer_into
from kernels_numba.cpu.decode_stack import decode_layers_into
from kernels_numba.cpu.matvec.dispatch import linear_into
from kernels_numba.cpu.matvec.run_matvec import run_matvec_into
from kernels_numba.cpu.matvec.tile_gemm import tiled_matmul_into


def _cpu_kernel_modules():
    for info in pkgutil.walk_packages(kernels_numba.cpu.__path__, "kernels_numba.cpu."):
        yield importlib.import_module(info.name)


def _parallel_dispatchers():
    for module in _cpu_kernel_modules():
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.targetoptions.get("parallel"):
                yield f"{module.__name__}.{name}", value


def test_every_kernel_that_wakes_the_thread_pool_releases_the_gil():
    found = dict(_parallel_dispatchers())
    assert len(found) >= 10  # the walk found the kernel modules
    holding = sorted(name for name, dispatcher in found.items() if not dispatcher.targetoptions.get("nogil"))
    assert holding == []


@pytest.mark.parametrize("kernel", [decode_layers_into, decode_layer_into, linear_into, run_matvec_into,
                                    tiled_matmul_into],
                         ids=lambda kernel: kernel.__name__)
def test_a_steps_long_calls_release_the_gil(kernel):
    assert kernel.targetoptions.get("nogil") is True
