"""numba's compile events ("numba:compile") as plain callbacks: which kernel started or finished compiling.

numba fires the event around each JIT compile, not around a load from its on-disk cache, so a warm cache is
silent. A kernel compiling the kernels it calls nests their events inside its own (depth > 0). numba is imported
only when a listener starts, so importing this module stays cheap.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

COMPILE_EVENT_KIND = "numba:compile"


@dataclass(frozen=True)
class CompileEvent:
    kernel: str  # the Python function's name: "rms_norm_rows_into"
    module: str  # where it is defined: "kernels_numba.cpu.norm", or numba's own ("numba.cpython.unicode")
    is_start: bool
    depth: int  # 0 = a top-level compile, 1 = compiled by a top-level compile, ...
    is_failed: bool = False  # typing or lowering raised (numba may try and drop candidate signatures)
    is_cached: bool = True  # the result goes to numba's on-disk cache (cache=True)

    @property
    def is_numba_helper(self) -> bool:
        """numba's own implementations (of len, str.join, ...) compiled for a kernel that uses them."""
        return self.module.split(".")[0] == "numba"


@contextmanager
def listen_to_compiles(on_event: Callable[[CompileEvent], None]) -> Iterator[None]:
    """Calls on_event for every compile that starts or ends inside the block, on the compiling thread and under
    numba's compiler lock: on_event must be quick and must not compile."""
    from numba.core import event

    listener = _listener_class()(on_event)
    event.register(COMPILE_EVENT_KIND, listener)
    try:
        yield
    finally:
        event.unregister(COMPILE_EVENT_KIND, listener)


@functools.cache
def _listener_class() -> type:
    from numba.core import event

    class CompileListener(event.Listener):
        def __init__(self, on_event: Callable[[CompileEvent], None]):
            self.on_event = on_event
            self.depths = threading.local()

        def on_start(self, ev) -> None:
            depth = getattr(self.depths, "value", 0)
            self.depths.value = depth + 1
            self.on_event(make_compile_event(ev, depth))

        def on_end(self, ev) -> None:
            self.depths.value = depth = getattr(self.depths, "value", 1) - 1
            self.on_event(make_compile_event(ev, depth))

    return CompileListener


def make_compile_event(ev, depth: int) -> CompileEvent:
    dispatcher = (ev.data or {}).get("dispatcher")
    py_func = getattr(dispatcher, "py_func", None)
    cache = getattr(dispatcher, "_cache", None)
    return CompileEvent(kernel=getattr(py_func, "__name__", None) or "kernel",
                        module=getattr(py_func, "__module__", None) or "", is_start=ev.is_start, depth=depth,
                        is_failed=is_failed(ev), is_cached=cache is not None and type(cache).__name__ != "NullCache")


def is_failed(ev) -> bool:
    """Whether the compile raised. numba's Event.is_failed says the opposite (True when no exception came, in
    numba 0.68): the exception details it keeps are read instead."""
    return ev.is_end and getattr(ev, "_exc_details", None) is not None
