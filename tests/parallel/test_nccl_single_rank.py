"""NCCL through nccl4py on a real GPU (scripts/gpu_check.sh runs this file): a one-rank communicator on device
arrays, the whole tensor-parallel route over it, and with two GPUs or more the --tp 2 parity. Skipped here
(no GPU; the simulator has no NCCL)."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from pocketcli.device import cuda_problem

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or cuda_problem() is not None:
    pytest.skip("needs a real NVIDIA GPU", allow_module_level=True)
if importlib.util.find_spec("nccl") is None:
    pytest.skip("needs nccl4py (pip install 'pocketllm[cuda]')", allow_module_level=True)

from numba import cuda  # noqa: E402

from pocketcli.parallel.nccl_communicator import NcclCommunicator, make_unique_id  # noqa: E402
from tests.models.tiny_gguf import write_tiny_model  # noqa: E402
from tests.parallel.one_rank_route import one_rank_outputs, outputs  # noqa: E402
from tests.parallel.tp_engines import make_engine, run_checks  # noqa: E402


@pytest.fixture(scope="module")
def comm():
    communicator = NcclCommunicator(1, 0, make_unique_id())
    yield communicator
    communicator.close()


def test_collectives_on_device_arrays(comm):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(comm.all_reduce(cuda.to_device(host)).copy_to_host(), host)
    np.testing.assert_array_equal(comm.all_gather(cuda.to_device(host)).copy_to_host(), host[None])
    np.testing.assert_array_equal(comm.broadcast(cuda.to_device(host), 0).copy_to_host(), host)
    comm.barrier()


def test_one_rank_route_over_nccl(tmp_path, comm):
    """Every all-reduce and the vocabulary gather through NCCL on the device: the CUDA engine's results."""
    path = write_tiny_model(tmp_path / "gemma3.gguf", "gemma3", 0, "Q8_0")
    plain = outputs(make_engine(path, 1, backend="cuda"))
    routed, collective_seconds = one_rank_outputs(path, comm, backend="cuda")
    assert collective_seconds > 0
    assert routed["batched"] == plain["batched"] and routed["alone"] == plain["alone"]
    np.testing.assert_allclose(routed["logits"], plain["logits"], atol=1e-5, rtol=0)


@pytest.mark.skipif(len(cuda.gpus) < 2, reason="needs two GPUs")
def test_tp2_over_two_gpus_matches_one(tmp_path):
    path = write_tiny_model(tmp_path / "gemma3.gguf", "gemma3", 0, "Q8_0")
    prompts = [[1, 40, 50, 60, 70, 80, 90], [1, 300, 21, 22]]
    reference = run_checks(path, 1, prompts, 8, backend="cuda")
    result = run_checks(path, 2, prompts, 8, backend="cuda", devices=(0, 1))
    assert result["batched"] == reference["batched"] and result["alone"] == reference["alone"]
    np.testing.assert_allclose(result["logits"], reference["logits"], atol=1e-3, rtol=0)
