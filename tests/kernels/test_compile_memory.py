"""Memory given back around kernel compiles (kernels_numba/compile_memory.py): the weights' resident pages leave at
a top-level compile's start and come back intact at their next read; compiles inside still give right answers."""
import sys

import numpy as np
import pytest

from kernels_numba import compile_memory
from kernels_numba.compile_events import CompileEvent
from tests.kernels.resident_memory import resident_kib

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps and madvise: Linux")


def event(is_start: bool, depth: int) -> CompileEvent:
    return CompileEvent(kernel="k", module="tests", is_start=is_start, depth=depth)


@pytest.fixture
def weights(tmp_path):
    """A read-only np.memmap of a 4 MiB file, every page resident, as the model's weights are after a prefill."""
    path = tmp_path / "weights.bin"
    expected = np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8)
    expected.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    assert int(mapped.sum(dtype=np.int64)) == int(expected.sum(dtype=np.int64))
    return str(path), mapped, expected


def test_top_level_compile_start_drops_read_only_shared_mappings_only(weights, tmp_path):
    path, mapped, expected = weights
    writable_path = tmp_path / "scratch.bin"
    writable = np.memmap(writable_path, dtype=np.uint8, mode="w+", shape=(1 << 20,))
    writable[:] = 7
    assert resident_kib(path) >= 4000
    compile_memory.on_compile_event(event(is_start=True, depth=1))  # nested: nothing dropped
    assert resident_kib(path) >= 4000
    compile_memory.on_compile_event(event(is_start=True, depth=0))
    assert resident_kib(path) < 100
    assert resident_kib(str(writable_path)) >= 1000  # a writable mapping keeps its pages (and its data)
    assert np.array_equal(mapped, expected) and int(writable.sum()) == 7 << 20


def test_compiles_inside_the_block_run_right(weights):
    import numba

    path, mapped, expected = weights
    with compile_memory.release_memory_around_compiles():
        first = numba.njit(lambda x: x * 3 + 1)(4)  # a top-level compile: the weights leave, LLVM's code too
        second = numba.njit(lambda x: x.sum())(np.arange(5.0))  # LLVM's code pages fault back in
    assert (first, second) == (13, 10.0)
    assert resident_kib(path) < 100 and np.array_equal(mapped, expected)


def test_llvm_code_pages_are_picked_only_from_its_text_mapping():
    assert compile_memory.is_llvm_code("/x/llvmlite/binding/libllvmlite.so", "r-xp")
    assert not compile_memory.is_llvm_code("/x/llvmlite/binding/libllvmlite.so", "rw-p")
    assert not compile_memory.is_llvm_code("/usr/lib/libc.so.6", "r-xp")
    assert compile_memory.is_read_only_shared_file("/m/model.gguf", "r--s")
    assert not compile_memory.is_read_only_shared_file("/m/model.gguf", "r--p")
    assert not compile_memory.is_read_only_shared_file("/dev/shm/x", "r--s")


def top_level_compile_inside_the_block() -> None:
    from numba.core import event

    with compile_memory.release_memory_around_compiles():
        with event.trigger_event("numba:compile", data={}):  # a compile's start and end, as numba reports them
            pass


def test_switched_off_by_env(weights, monkeypatch):
    path, mapped, _ = weights
    monkeypatch.setenv(compile_memory.DISABLE_ENV, "0")
    top_level_compile_inside_the_block()
    assert resident_kib(path) >= 4000
    monkeypatch.delenv(compile_memory.DISABLE_ENV)
    top_level_compile_inside_the_block()
    assert resident_kib(path) < 100


def test_llvm_code_is_clean_here():
    """llvmlite's library has no text relocations: its code pages can be dropped and read back from the file."""
    import llvmlite.binding  # noqa: F401  (maps libllvmlite.so)

    assert compile_memory.llvm_code_is_clean()
