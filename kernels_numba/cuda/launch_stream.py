"""Where kernels launch: the default stream, or a cuda.core GraphBuilder while a decode step is captured.

During a capture every buffer the launchers allocate is kept alive by the capture, so a replay of the graph
finds the same (pointer-stable) buffers.
"""
from __future__ import annotations

from contextlib import contextmanager

_state = {"stream": 0, "kept": None}


def current_stream():
    return _state["stream"]


def keep_alive(array):
    """Hold `array` for as long as the graph being captured lives (no-op outside a capture)."""
    if _state["kept"] is not None:
        _state["kept"].append(array)
    return array


@contextmanager
def launching_on(stream, kept: list | None = None):
    """Launch on `stream` (e.g. a GraphBuilder) and record the buffers allocated meanwhile into `kept`."""
    previous = dict(_state)
    _state["stream"], _state["kept"] = stream, kept
    try:
        yield
    finally:
        _state.update(previous)
