import importlib

import pytest


@pytest.fixture(params=["serial", "parallel"])
def threading_mode(request, monkeypatch):
    """Run a test once with every kernel on the calling thread and once with every kernel on the thread pool."""
    policy = importlib.import_module("kernels_numba.cpu.parallel_policy")
    activation = importlib.import_module("kernels_numba.cpu.activation")
    threshold = 0 if request.param == "parallel" else 1 << 62
    monkeypatch.setattr(policy, "PARALLEL_MIN_WORK", threshold)
    monkeypatch.setattr(activation, "PARALLEL_MIN_VALUES", threshold)
    return request.param


@pytest.fixture(params=["numpy", "sgemm"])
def blas_path(request, monkeypatch):
    """Run a test once on numpy's matmul from the calling thread and once with sgemm called from numba threads
    (that needs OpenBLAS at one thread, as `pocket` runs it; pytest loads numpy before that can be set)."""
    blas = importlib.import_module("kernels_numba.cpu.matvec.blas")
    openblas = blas.loaded_openblas()
    if request.param == "numpy":
        monkeypatch.setattr(blas, "find_sgemm", lambda: None)
        for module in ("kernels_numba.cpu.matvec.dispatch", "kernels_numba.cpu.prefill_attention"):
            monkeypatch.setattr(importlib.import_module(module), "find_sgemm", lambda: None)
        yield request.param
        return
    if openblas is None:
        pytest.skip("numpy is not on OpenBLAS here")
    threads = openblas.get_num_threads()
    openblas.set_num_threads(1)
    yield request.param
    openblas.set_num_threads(threads)
