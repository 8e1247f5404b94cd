"""One sequence's decode step on a CUDA device, captured once as a CUDA graph and replayed for every later token.

An eager step launches ~400 kernels from Python. On an H200 that took ~57 ms of host time a token for a
Gemma-3-270M-shaped model (~140 us an op, bench/cuda_op_profile.py), so decode was bound by Python, not by the
GPU. Here the first plain decode step of a lone sequence is captured (kernels_numba.cuda.decode_graph) and each
later one only writes the step's inputs (token, position, slot, block table, length) and replays the graph.
Batches of several sequences, prefill chunks, speculative rounds, scoring and hybrid (recurrent-state) models
run eagerly as before. Before the graph is trusted, its first replay at a new position is checked against the
eager step on the same inputs (which rewrites the same cache slot with the same values): a step that read a
value fixed at capture would differ there, and the engine then stays eager. Without a GPU (the simulator)
the step runs eagerly on the same input buffers.
"""
from __future__ import annotations

import sys

import numpy as np

from ..models.attn_metadata import AttnMetadata
from .scheduler import ScheduledBatch

LOGITS_TOLERANCE = 1e-3  # replay and eager step run the same kernels on the same inputs: equal but for atomics


class GraphedDecode:
    def __init__(self, model, kv_cache, blocks_per_seq: int):
        self.model, self.kv_cache = model, kv_cache
        self.blocks_per_seq = blocks_per_seq
        self.captured = None
        self.verified = False
        self.disabled = kv_cache.recurrent is not None  # hybrid models keep per-sequence recurrent state

    def accepts(self, batch: ScheduledBatch) -> bool:
        """Whether `batch` is one sequence's plain decode step (its last token, no drafts)."""
        if self.disabled or len(batch.items) != 1:
            return False
        item = batch.items[0]
        return item.num_new_tokens == 1 and item.num_draft_tokens == 0 and item.samples_token

    def run(self, token_ids: np.ndarray, positions: np.ndarray, attn: AttnMetadata):
        """Device logits [1, vocab] of the step (a buffer the next replay overwrites), or None: run it eagerly.
        The arguments are ModelRunner.prepare_inputs' for the accepted batch."""
        inputs = self._inputs(token_ids, positions, attn)
        try:
            if self.captured is None:
                return self._capture(inputs)
            logits = self.captured.replay(inputs)
            if not self.verified:
                self._verify(logits)
            return logits
        except Exception as error:  # a graph the driver refuses, or one that disagrees: eager from now on
            self._give_up(str(error).splitlines()[0] if str(error) else type(error).__name__)
            return None

    def _capture(self, inputs: dict):
        from kernels_numba import CapturedStep

        shapes = {name: (np.asarray(value).shape, np.asarray(value).dtype.type) for name, value in inputs.items()}
        self.captured = CapturedStep(self._step, shapes)
        self.captured.write_inputs(inputs)
        if not self.captured.capture():  # no graphs here (simulator): replay runs the step eagerly, no check
            self.verified = True
        return self.captured.replay(inputs)  # a graph records without running: this step's logits come now

    def _verify(self, replayed) -> None:
        """The replay at a position the capture never saw against the eager step on the same input buffers."""
        ops = self.model.ops
        graph_logits = ops.to_host(replayed).copy()
        eager_logits = ops.to_host(self._step(self.captured.inputs))
        if graph_logits.shape != eager_logits.shape or not np.allclose(graph_logits, eager_logits, rtol=0,
                                                                       atol=LOGITS_TOLERANCE):
            raise RuntimeError("the captured decode step disagrees with the eager one")
        self.verified = True

    def _give_up(self, reason: str) -> None:
        self.disabled, self.captured = True, None
        print(f"warning: CUDA graph decode off ({reason}); decoding step by step", file=sys.stderr)

    def _step(self, inputs: dict):
        """The decode step on device input buffers -> device logits [1, vocab]."""
        model = self.model
        attn = AttnMetadata(inputs["slots"], inputs["tables"], inputs["lens"], inputs["starts"])
        model.keep_on_device = True  # the hidden state stays where the graph's next kernel reads it
        try:
            hidden = model.forward(inputs["tokens"], inputs["positions"], attn, self.kv_cache.keys,
                                   self.kv_cache.values)
            return model.compute_logits(hidden, keep_on_device=True)
        finally:
            model.keep_on_device = False

    def _inputs(self, token_ids: np.ndarray, positions: np.ndarray, attn: AttnMetadata) -> dict:
        """The step's input buffers' values: the block table padded to the longest a sequence can have, so one
        graph serves every context length."""
        table = np.full((1, self.blocks_per_seq), -1, dtype=np.int32)
        table[0, :attn.block_tables.shape[1]] = attn.block_tables[0]
        return {"tokens": token_ids, "positions": positions, "slots": attn.slot_mapping, "tables": table,
                "lens": attn.context_lens, "starts": attn.query_start_loc}
