"""Gated activations on column views of one stacked projection (gate | up), read in place without copies."""
import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba.cpu import activation

cpu, reference = get_ops("cpu"), get_ops("reference")


@pytest.mark.parametrize("name", ["silu_mul", "gelu_mul"])
def test_gate_and_up_column_views_match_reference(name, threading_mode, monkeypatch):
    copies = []
    real = np.ascontiguousarray
    monkeypatch.setattr(activation.np, "ascontiguousarray", lambda a, **k: copies.append(a) or real(a, **k))
    y = (np.random.default_rng(0).standard_normal((37, 2 * 1100)) * 4).astype(np.float32)
    gate, up = np.split(y, 2, axis=1)  # as the host ops.split_columns hands them over
    got = getattr(cpu, name)(gate, up)
    monkeypatch.undo()
    assert not copies and got.flags.c_contiguous and got.shape == gate.shape
    np.testing.assert_allclose(got, getattr(reference, name)(gate, up), rtol=1e-5, atol=1e-6)


def test_other_layouts_still_work_through_a_copy(threading_mode):
    rng = np.random.default_rng(1)
    gate = (rng.standard_normal((300, 40)) * 3).astype(np.float32).T  # columns contiguous, rows not
    up = rng.standard_normal((40, 300)).astype(np.float32)
    np.testing.assert_allclose(cpu.gelu_mul(gate, up), reference.gelu_mul(gate, up), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="differ"):
        cpu.gelu_mul(gate[:, :10], up)
