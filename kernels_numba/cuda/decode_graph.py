"""A decode step captured once as a CUDA graph and replayed per token (cuda.core GraphBuilder as launch stream).

The step reads its inputs (token ids, positions, slots, block tables, lengths) from device buffers allocated
here once, and every buffer its launchers allocate while it is captured is kept alive with the graph: a replay
finds the same pointers, so only the input buffers are rewritten before each launch. Without a GPU (the
simulator) or without cuda.core, `replay` runs the step eagerly on the same buffers: same results, no graph.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import config, cuda

from kernels_numba.cuda.launch_stream import launching_on


class CapturedStep:
    def __init__(self, step: Callable[[dict], object], input_shapes: dict[str, tuple[tuple[int, ...], type]]):
        """`step(inputs)` launches one decode step reading the device arrays `inputs` and returns its output."""
        self.step = step
        self.inputs = {name: cuda.device_array(shape, dtype=dtype) for name, (shape, dtype) in input_shapes.items()}
        self.kept: list = []  # buffers allocated during capture: alive, and at fixed addresses, as long as the graph
        self.graph = None
        self.output = None

    def write_inputs(self, values: dict[str, np.ndarray]) -> None:
        for name, value in values.items():
            self.inputs[name].copy_to_device(np.ascontiguousarray(value, dtype=self.inputs[name].dtype))

    def capture(self) -> bool:
        """Warm up (compile kernels, upload parameters) eagerly, then capture; False when graphs are unavailable."""
        self.output = self.step(self.inputs)
        if config.ENABLE_CUDASIM:
            return False
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        device = Device()
        device.set_current()
        self.stream = device.create_stream()
        builder = device.create_graph_builder()
        builder.begin_building(mode="relaxed")  # relaxed: allocating the captured step's buffers is allowed
        with launching_on(builder, self.kept):
            self.output = self.step(self.inputs)
        self.graph = builder.end_building().complete()
        return True

    def replay(self, values: dict[str, np.ndarray]):
        """Run the step on new inputs; returns the step's output (device buffers fixed at capture)."""
        self.write_inputs(values)
        if self.graph is None:
            self.output = self.step(self.inputs)
            return self.output
        # the copies ran on the legacy stream, which a cuda.core stream (non-blocking) does not wait for, and a
        # copy from pageable memory may return before its DMA lands: the graph must not read the old inputs
        cuda.synchronize()
        self.graph.launch(self.stream)
        self.stream.sync()
        return self.output
