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
