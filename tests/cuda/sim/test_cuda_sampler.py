"""Greedy argmax and top-k on the device: only the winners come back to the host."""
import numpy as np

from kernels_numba import get_ops

cuda_ops = get_ops("cuda")


def test_argmax_takes_the_first_of_ties_like_numpy():
    logits = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
    logits[1, [17, 250]] = 9.0  # a tie: the lower index wins
    np.testing.assert_array_equal(cuda_ops.argmax(logits), np.argmax(logits, axis=-1))
    assert cuda_ops.argmax(logits)[1] == 17


def test_top_k_returns_the_k_best_in_order():
    logits = np.random.default_rng(1).standard_normal((2, 200)).astype(np.float32)
    logits[0, [5, 6]] = 3.5  # ties are ordered by index
    values, ids = cuda_ops.top_k(logits, 5)
    want_ids = np.argsort(-logits, axis=-1, kind="stable")[:, :5]
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(values, np.take_along_axis(logits, want_ids, axis=-1))
