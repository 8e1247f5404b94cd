"""The weight arena (kernels_numba/cpu/matvec/weight_arena.py): page-aligned arrays cut one after another from
huge-page mappings, a tensor bigger than a chunk in a mapping of its own, a mapping given back once nothing cut
from it is left, the run layouts made there, and (where Linux has transparent huge pages) huge pages behind it."""
import gc
import mmap
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from gguf_loader.weight_tensor import make_weight_tensor
from kernels_numba.cpu.matvec import dispatch, run_layout, weight_arena
from kernels_numba.cpu.matvec.weight_arena import HUGE_PAGE_BYTES, TENSOR_ALIGN_BYTES, WeightArena
from tests.kernels.kernel_test_data import random_weight

needs_madvise = pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE on this OS")
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _mapping_of(array: np.ndarray):
    return array.base


@needs_madvise
def test_arrays_are_cut_one_after_another_page_aligned_and_apart():
    arena = WeightArena(chunk_bytes=1 << 20)
    first, second = arena.take((3, 100)), arena.take((7,))
    assert first.shape == (3, 100) and second.shape == (7,) and first.dtype == second.dtype == np.uint8
    assert first.flags.writeable and first.flags.c_contiguous
    assert first.ctypes.data % TENSOR_ALIGN_BYTES == 0 and second.ctypes.data % TENSOR_ALIGN_BYTES == 0
    assert second.ctypes.data - first.ctypes.data == TENSOR_ALIGN_BYTES  # next page, same mapping
    assert _mapping_of(first) is _mapping_of(second)
    first[...] = 1
    second[...] = 2
    assert (first == 1).all() and (second == 2).all()


@needs_madvise
def test_a_full_chunk_or_a_bigger_tensor_gets_a_new_mapping_aligned_to_a_huge_page():
    arena = WeightArena(chunk_bytes=HUGE_PAGE_BYTES)
    small = arena.take((HUGE_PAGE_BYTES - 5000,))
    spill = arena.take((6000,))  # does not fit after `small`
    big = arena.take((3 * HUGE_PAGE_BYTES + 1,))
    assert len({id(_mapping_of(a)) for a in (small, spill, big)}) == 3
    for array in (small, spill, big):
        assert array.ctypes.data % HUGE_PAGE_BYTES == 0
    big[-1] = 7  # the whole tensor is inside its mapping
    after_big = arena.take((10,))
    assert _mapping_of(after_big) is _mapping_of(big)  # the rest of big's last huge page is used


@needs_madvise
def test_a_mapping_is_given_back_once_nothing_cut_from_it_is_left():
    arena = WeightArena(chunk_bytes=1 << 20)
    first, second = arena.take((100,)), arena.take((100,))
    del first
    gc.collect()
    assert arena._mapping() is _mapping_of(second)  # still holds second
    del second
    gc.collect()
    assert arena._mapping() is None  # unmapped: nothing of it is left
    assert arena.take((100,)).ctypes.data % HUGE_PAGE_BYTES == 0  # the next one starts a new mapping


def test_empty_weights_is_plain_memory_when_turned_off(monkeypatch):
    monkeypatch.setenv(weight_arena.ENV, "0")
    assert not weight_arena.huge_pages_wanted()
    array = weight_arena.empty_weights((4, 5))
    assert array.shape == (4, 5) and array.dtype == np.uint8 and array.base is None  # np.empty owns its memory


@needs_madvise
def test_run_layouts_are_made_in_the_arena(monkeypatch):
    if not dispatch.USE_RUN_LAYOUT:
        pytest.skip("the run layout needs integer dot instructions")
    monkeypatch.setenv(weight_arena.ENV, "1")
    rng = np.random.default_rng(0)
    weight = random_weight(QT.Q4_1, (16, 512), rng)
    runs = run_layout.run_weights(weight)
    assert runs.data.ctypes.data % TENSOR_ALIGN_BYTES == 0 and not runs.data.flags.writeable
    buffer = _mapping_of(runs.data).base  # the mapping, or a memoryview of it
    assert isinstance(getattr(buffer, "obj", buffer), mmap.mmap)
    np.testing.assert_array_equal(runs.data, run_layout.repack(run_layout.qt.Q4_1, np.asarray(weight.data)))


def _anon_huge_kib(address: int) -> int | None:
    """AnonHugePages (KiB) of the /proc/self/smaps mapping holding address, None where there is no such file."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            first, stop = (int(part, 16) for part in head.split("-"))
            inside = first <= address < stop
        elif inside and head == "AnonHugePages:":
            return int(line.split()[1])
    return None


@needs_madvise
def test_the_arena_is_in_huge_pages_where_linux_gives_them():
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        pytest.skip("no transparent huge pages here")
    if "[never]" in setting:
        pytest.skip("transparent huge pages are turned off on this machine")
    arena = WeightArena(chunk_bytes=4 * HUGE_PAGE_BYTES)
    weights = arena.take((4 * HUGE_PAGE_BYTES,))
    weights[...] = 3  # faults the pages in
    assert _anon_huge_kib(weights.ctypes.data) >= HUGE_PAGE_BYTES // 1024
