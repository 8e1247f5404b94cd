"""A model's ops with decode_layers swapped for compiling its tail: a first run's tail child (commands/first_run.py)
runs one decode step through it, which compiles the kernels the step's decode_layers compiles last
(kernels_numba.cpu.decode_stack.compile_decode_tail) from the step's own arguments, then stops the step."""
from __future__ import annotations


class DecodeTailCompiled(Exception):
    """The step reached its decode layers and the tail is compiled (or the model has none to compile): stop."""


class DecodeTailOps:
    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name: str):
        return getattr(self._ops, name)

    def decode_layers(self, x, plans, k_caches, v_caches, block_tables, positions, slots) -> bool:
        self._ops.compile_decode_tail(x, plans, k_caches, v_caches, block_tables, positions, slots)
        raise DecodeTailCompiled()

    def decode_layer(self, *args) -> None:
        raise DecodeTailCompiled()  # a layer at a time (taps, mixed steps): decode_layer_into has no tail to split
