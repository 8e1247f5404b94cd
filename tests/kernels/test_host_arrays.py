"""The glue between ops, memory and top-k on the host backends (kernels_numba/host_arrays.py): each op on hand-made
arrays against plain numpy, and the CPU backend giving the reference's results (issue 27: every backend has
every op, so a model never asks where its arrays live)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernels_numba import get_ops
from tests.kernels.kernel_test_data import random_weight

reference = get_ops("reference")
RNG = np.random.default_rng(27)
X, Y = (RNG.standard_normal((4, 12)).astype(np.float32) for _ in range(2))
BIAS = RNG.standard_normal(12).astype(np.float32)


def test_arithmetic_between_ops():
    np.testing.assert_array_equal(reference.add(X, Y), X + Y)
    np.testing.assert_array_equal(reference.scale(X, 0.5), X * np.float32(0.5))
    assert reference.scale(X, 3.0).dtype == np.float32
    y = X.copy()
    assert reference.add_bias(y, BIAS) is y  # written into the projection's fresh output
    np.testing.assert_array_equal(y, X + BIAS)


def test_layout():
    parts = reference.split_columns(X, (5, 4, 3))
    for got, want in zip(parts, np.split(X, [5, 9], axis=1)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(reference.concat_columns(parts), X)
    np.testing.assert_array_equal(reference.concat_rows([X[:1], X[1:]]), X)
    np.testing.assert_array_equal(reference.repeat_rows(X[:2], 3), np.repeat(X[:2], 3, axis=0))
    view = X[:, 2:7]
    assert not view.flags.c_contiguous and reference.contiguous(view).flags.c_contiguous
    assert reference.contiguous(X) is X


def test_an_op_may_write_only_into_a_fresh_contiguous_array():
    assert reference.can_write_into(X.copy())
    assert not reference.can_write_into(X[:, :3])  # a view
    assert not reference.can_write_into(np.ones(3)[::2])
    frozen = X.copy()
    frozen.flags.writeable = False
    assert not reference.can_write_into(frozen)


def test_states_are_copied_assigned_and_cleared_in_place():
    state = X.copy()
    snapshot = reference.copy_array(state)
    reference.fill_zeros(state[1:2])
    assert not state[1].any() and state[0].any() and snapshot[1].any()
    reference.assign(state, snapshot)
    np.testing.assert_array_equal(state, X)


def test_memory_is_the_host_itself():
    z = reference.zeros((3, 5), np.float16)
    assert z.shape == (3, 5) and z.dtype == np.float16 and not z.any() and z.flags.writeable
    positions = np.arange(4, dtype=np.int64)
    assert reference.to_device(positions, np.int32) is positions  # no conversion: the kernels take it as it is
    assert reference.to_host(X) is X and not reference.is_device_array(X)
    w = random_weight(QT.Q8_0, (8, 32), RNG)
    assert reference.upload_weight(w) is w and reference.uploaded_bytes() == 0
    assert reference.free_memory_bytes() is None or reference.free_memory_bytes() > 0


def test_top_k_orders_ties_by_id_like_the_device():
    logits = RNG.standard_normal((3, 300)).astype(np.float32)
    logits[0, [40, 7, 99]] = 9.0  # a three-way tie for first: ids ascending
    logits[1, [3, 200]] = 5.0  # a tie across the k-th place: the lower id is kept
    logits[1, 250] = 6.0
    values, ids = reference.top_k(logits, 2)
    want_ids = np.argsort(-logits, axis=-1, kind="stable")[:, :2]
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(values, np.take_along_axis(logits, want_ids, axis=-1))
    assert ids.dtype == np.int64 and list(ids[0]) == [7, 40] and list(ids[1]) == [250, 3]
    np.testing.assert_array_equal(reference.argmax(logits), np.argmax(logits, axis=-1))
    on_device = reference.top_k_on_device(logits[:, :200], 200)  # the whole vocabulary: every id, sorted
    assert on_device[1].dtype == np.int32 and sorted(on_device[1][2]) == list(range(200))
    with pytest.raises(ValueError, match="top_k_on_device"):
        reference.top_k_on_device(np.zeros((1, 1000), np.float32), reference.MAX_TOP_K + 1)


def test_the_host_multiplies_each_weight_on_its_own():
    weights = tuple(random_weight(QT.Q8_0, (rows, 64), RNG, name=f"w{rows}") for rows in (16, 8, 8))
    assert reference.stack_weights(weights) == weights  # no stacked copy: the file's pages, once


def test_the_cpu_glue_gives_the_reference_results():
    cpu = get_ops("cpu")
    np.testing.assert_array_equal(cpu.add(X, Y), reference.add(X, Y))
    np.testing.assert_array_equal(cpu.scale(X, 0.25), reference.scale(X, 0.25))
    np.testing.assert_array_equal(cpu.add_bias(X.copy(), BIAS), reference.add_bias(X.copy(), BIAS))
    for a, b in zip(cpu.split_columns(X, (6, 6)), reference.split_columns(X, (6, 6))):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(cpu.repeat_rows(X, 2), reference.repeat_rows(X, 2))
    np.testing.assert_array_equal(cpu.top_k(X, 3)[1], reference.top_k(X, 3)[1])
    np.testing.assert_array_equal(cpu.argmax(X), reference.argmax(X))
    weights = tuple(random_weight(QT.Q4_0, (rows, 64), RNG, name=f"q{rows}") for rows in (8, 4))
    assert cpu.stack_weights(weights) == reference.stack_weights(weights)


def test_every_host_glue_op_reaches_both_host_backends():
    """reference and cpu re-export host_arrays.__all__: a function missing from it would be in neither."""
    from kernels_numba import host_arrays

    defined = {name for name, value in vars(host_arrays).items() if not name.startswith("_") and callable(value)
               and getattr(value, "__module__", "") == host_arrays.__name__}
    assert defined <= set(host_arrays.__all__)
    for name in host_arrays.__all__:
        assert getattr(get_ops("cpu"), name) is getattr(reference, name) is getattr(host_arrays, name), name
