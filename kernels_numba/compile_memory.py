"""Resident memory that kernel compiles do not need, given back around each compile (Linux with glibc).

LLVM keeps the memory of every kernel a process compiles for as long as it lives. A first `pocket generate`
compiles its ~50 decode kernels after its first token (commands/first_run.py), with the model's weights resident:
its peak was the two summed, 588 MiB for Gemma 3 270M. Around each top-level compile (nested ones inside it):
- at its start, the pages of read-only shared file mappings (the weights: np.memmap mode "r" of the model file
  and of the run-layout store) leave this process's resident set. The pages stay in the page cache and come back
  at their next read as minor faults; a compile does not read them.
- at its end, glibc's malloc gives its free pages back (malloc_trim), and the pages of LLVM's own code
  (libllvmlite.so's text, ~57 MB resident after compiling) leave the resident set; a later compile faults them
  back from the page cache.
So the compile burst no longer peaks on top of the weights, and what stays after it is ~70 MB smaller: the first
run's peak fell from 578-589 to ~521 MiB. Nothing changes what a mapping holds: MADV_DONTNEED on a shared file
mapping, or on private text the loader never wrote (checked once), only drops page-table entries. Without /proc/self/maps or glibc's
malloc_trim (macOS, Windows, musl) the matching step does nothing.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kernels_numba.compile_events import CompileEvent, listen_to_compiles

MAPS_PATH = "/proc/self/maps"
SMAPS_PATH = "/proc/self/smaps"
MADV_DONTNEED = 4  # Linux
LLVM_LIBRARY_PREFIX = "libllvmlite"
DISABLE_ENV = "POCKET_RELEASE_COMPILE_MEMORY"  # "0": keep it all (numba's own behaviour)


@contextmanager
def release_memory_around_compiles() -> Iterator[None]:
    """Inside the block, every compile gives back the memory it does not need (see the module's docstring)."""
    if os.environ.get(DISABLE_ENV) == "0":
        yield
        return
    with listen_to_compiles(on_compile_event):
        yield


def on_compile_event(event: CompileEvent) -> None:
    """On the compiling thread, under numba's compiler lock: a few milliseconds (reading /proc/self/maps)."""
    if event.depth != 0:  # nested compiles: the top-level one around them gives back for all of them
        return
    if event.is_start:
        drop_resident_pages(is_read_only_shared_file)
    else:
        trim_malloc_heap()
        if llvm_code_is_clean():
            drop_resident_pages(is_llvm_code)


def is_read_only_shared_file(path: str, permissions: str) -> bool:
    return permissions == "r--s" and path.startswith("/") and not path.startswith("/dev/")


def is_llvm_code(path: str, permissions: str) -> bool:
    return permissions == "r-xp" and os.path.basename(path).startswith(LLVM_LIBRARY_PREFIX)


@functools.cache
def llvm_code_is_clean() -> bool:
    """Whether libllvmlite.so's text holds only pages read from the file (checked once, /proc/self/smaps): with
    text relocations the loader would have written some, and dropping those would lose them."""
    dirty_kib, inside, seen = 0, False, False
    try:
        with open(SMAPS_PATH, encoding="utf-8", errors="replace") as smaps:
            for line in smaps:
                fields = line.split(maxsplit=5)
                if fields and "-" in fields[0] and not fields[0].endswith(":"):
                    inside = len(fields) == 6 and is_llvm_code(fields[5].rstrip("\n"), fields[1])
                    seen = seen or inside
                elif inside and fields[0] == "Private_Dirty:":
                    dirty_kib += int(fields[1])
    except (OSError, ValueError, IndexError):
        return False
    return seen and dirty_kib == 0


def drop_resident_pages(is_wanted: Callable[[str, str], bool]) -> int:
    """MADV_DONTNEED on each mapping is_wanted(path, permissions) picks; the number of mappings dropped."""
    madvise = _libc_function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))
    if madvise is None:
        return 0
    dropped = 0
    for start, stop in mapped_ranges(is_wanted):
        dropped += madvise(start, stop - start, MADV_DONTNEED) == 0
    return dropped


def mapped_ranges(is_wanted: Callable[[str, str], bool]) -> list[tuple[int, int]]:
    """(start, stop) addresses of this process's file mappings that is_wanted(path, permissions) picks."""
    try:
        with open(MAPS_PATH, encoding="utf-8", errors="replace") as maps:
            lines = maps.readlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and is_wanted(fields[5].rstrip("\n"), fields[1]):
            start, stop = fields[0].split("-")
            ranges.append((int(start, 16), int(stop, 16)))
    return ranges


def trim_malloc_heap() -> None:
    malloc_trim = _libc_function("malloc_trim", (ctypes.c_size_t,))
    if malloc_trim is not None:
        malloc_trim(0)


@functools.cache
def _libc_function(name: str, argtypes: tuple) -> Callable | None:
    """The C library's function of this process, or None (not Linux, or not glibc for malloc_trim)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function
