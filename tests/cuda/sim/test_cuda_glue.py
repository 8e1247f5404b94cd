"""The CUDA glue ops that the host backends got too (issue 27): stacked projections, layout, memory, top-k against
the reference (tiny shapes: the simulator is slow)."""
import numpy as np
from gguf import GGMLQuantizationType as QT

from kernels_numba import get_ops
from tests.kernels.kernel_test_data import random_weight

cuda_ops, reference = get_ops("cuda"), get_ops("reference")
RNG = np.random.default_rng(270)


def test_stacked_weights_give_each_projection_in_one_linear():
    weights = tuple(random_weight(QT.Q8_0, (rows, 32), RNG, name=f"s{rows}") for rows in (4, 2, 2))
    (stacked,) = cuda_ops.stack_weights(weights)
    assert cuda_ops.stack_weights(weights)[0] is stacked  # the stacked copy is made once
    assert stacked.num_rows == 8 and cuda_ops.stack_weights(weights[:1]) == weights[:1]
    x = RNG.standard_normal((2, 32)).astype(np.float32)
    got = cuda_ops.split_columns(cuda_ops.linear(x, stacked), (4, 2, 2))
    for y, w in zip(got, weights):
        np.testing.assert_allclose(cuda_ops.to_host(y), reference.linear(x, w), rtol=1e-4, atol=1e-4)


def test_layout_memory_and_top_k_match_the_host():
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    d = cuda_ops.to_device(x)
    assert cuda_ops.contiguous(d) is d and not cuda_ops.can_write_into(d)
    np.testing.assert_array_equal(cuda_ops.to_host(cuda_ops.repeat_rows(d, 2)), reference.repeat_rows(x, 2))
    np.testing.assert_array_equal(cuda_ops.to_host(cuda_ops.concat_rows([d[:1], d[1:]])), reference.concat_rows([x]))
    z = cuda_ops.zeros((2, 3), np.float32)
    assert cuda_ops.is_device_array(z) and not cuda_ops.to_host(z).any()
    assert cuda_ops.free_memory_bytes() is None  # not checked ahead on a device
    logits = RNG.standard_normal((2, 40)).astype(np.float32)
    logits[0, [3, 9]] = 4.0
    for got, want in zip(cuda_ops.top_k(logits, 4), reference.top_k(logits, 4)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cuda_ops.argmax(logits), reference.argmax(logits))
