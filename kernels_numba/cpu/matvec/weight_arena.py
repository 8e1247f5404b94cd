"""Memory for the CPU kernels' weight copies (the run layouts), in transparent huge pages where the OS gives them.

A decode step reads every weight once, front to back: SmolLM2's 96 MB is ~24k pages of 4 KiB a token, each a
TLB miss and a page walk, and a stream the hardware prefetcher restarts at every page. In 2 MiB pages the same
weights are 48 pages. A decode step's layers (`forward`, 2 threads, in-process alternation against the same
copies in 4 KiB pages; Intel Xeon with AMX, 2 vCPUs, AVX2 tier): SmolLM2 1 sequence 4.41 -> 4.14 ms, 8 sequences
10.53 -> 10.28; Gemma 3 270M 5.59 -> 4.79 / 10.68 -> 10.18.

`take(shape)` hands out uint8 arrays cut from anonymous mappings of CHUNK_BYTES (or a tensor's size, rounded up to
whole huge pages, where it is bigger), each aligned to a huge page and madvised MADV_HUGEPAGE, one after another in
the order the tensors are made (a model's first steps make them in about the order a step reads them). The
memory is the process's own (not file-backed as a mapped file is): resident as the copies always are, but not
dropped and read again under memory pressure. A chunk is unmapped once no array cut from it is left (the arena
holds it weakly), so switching models frees the old copies but for the rest of a chunk the new ones share.
Where the OS has no MADV_HUGEPAGE (macOS, Windows) or POCKET_HUGE_PAGES=0: plain numpy arrays.
"""
from __future__ import annotations

import mmap
import os
import threading
import weakref

import numpy as np

HUGE_PAGE_BYTES = 2 << 20  # x86-64 and most ARM64 Linux kernels
CHUNK_BYTES = 32 << 20  # a mapping's size: at most this much of a dropped model stays mapped beside the next one
TENSOR_ALIGN_BYTES = 4096  # each array starts on a page, as a mapped file's tensor does
ENV = "POCKET_HUGE_PAGES"


def huge_pages_wanted() -> bool:
    """Whether weight copies go to huge pages: the OS can madvise them and POCKET_HUGE_PAGES is not 0."""
    return hasattr(mmap, "MADV_HUGEPAGE") and os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


class WeightArena:
    """Bump allocation of weight copies in huge-page mappings (see the module docstring); safe from any thread."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES):
        self.chunk_bytes = chunk_bytes
        self._lock = threading.Lock()
        self._mapping = None  # weakref to the array over the mapping being filled (what every cut array's base is)
        self._next_byte = self._end_byte = 0  # in that array: where the next cut may start, where its huge pages end

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A new writable uint8 array of shape (its bytes undefined until written)."""
        num_bytes = int(np.prod(shape, dtype=np.int64))
        with self._lock:
            mapping = self._mapping() if self._mapping is not None else None
            start = _round_up(self._next_byte, TENSOR_ALIGN_BYTES)
            if mapping is None or start + num_bytes > self._end_byte:
                mapping, start, self._end_byte = _new_mapping(max(self.chunk_bytes, num_bytes))
                self._mapping = weakref.ref(mapping)
            self._next_byte = start + num_bytes
            return mapping[start:start + num_bytes].reshape(shape)


def _new_mapping(num_bytes: int) -> tuple[np.ndarray, int, int]:
    """(a uint8 array over a new anonymous mapping, the first and the stop byte of the whole huge pages in it that
    hold at least num_bytes, advised MADV_HUGEPAGE). The mapping is one huge page longer than those, so an aligned
    span fits; the slack is never touched, so never resident."""
    size = _round_up(num_bytes, HUGE_PAGE_BYTES)
    mapping = mmap.mmap(-1, size + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                        prot=mmap.PROT_READ | mmap.PROT_WRITE)
    whole = np.frombuffer(mapping, dtype=np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE_BYTES
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE, start, size)
    except OSError:  # a kernel without transparent huge pages: the mapping still works, in small pages
        pass
    return whole, start, start + size


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


_ARENA = WeightArena()


def empty_weights(shape: tuple[int, ...]) -> np.ndarray:
    """A new writable uint8 array for a weight copy: in the process's huge-page arena where huge_pages_wanted(),
    else np.empty."""
    return _ARENA.take(shape) if huge_pages_wanted() else np.empty(shape, dtype=np.uint8)
