"""TensorParallelOps with a one-rank shared-memory communicator, in this process: the all-reduces, the
vocabulary gather and the masked embedding lookup all run and must leave every result bit-identical."""
from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from pocketcli.parallel.shm_communicator import ShmCommunicator, create_shm_group
from tests.models.tiny_gguf import write_tiny_model
from tests.parallel.one_rank_route import one_rank_outputs, outputs
from tests.parallel.tiny_moe_gguf import write_tiny_moe
from tests.parallel.tp_engines import make_engine


@pytest.mark.parametrize("arch, quant", [("gemma3", "Q8_0"), ("llama", "F32"), ("qwen3moe", "F32")])
def test_one_rank_route_changes_nothing(tmp_path, arch, quant):
    path = (write_tiny_moe(tmp_path / "moe.gguf") if arch == "qwen3moe"
            else write_tiny_model(tmp_path / f"{arch}.gguf", arch, 0, quant))
    plain = outputs(make_engine(path, 1))
    segment, handle = create_shm_group(multiprocessing.get_context("forkserver"), 1, 4096)
    comm = ShmCommunicator(handle, 0, segment)
    try:
        routed, collective_seconds = one_rank_outputs(path, comm)
    finally:
        comm.close()
        segment.unlink()
    assert collective_seconds > 0  # the collectives really ran
    assert routed["batched"] == plain["batched"] and routed["alone"] == plain["alone"]
    np.testing.assert_array_equal(routed["logits"], plain["logits"])
