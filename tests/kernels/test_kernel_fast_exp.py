"""exp_f32 (fast_exp.py): the vectorisable float32 exp behind SiLU, GELU and the prompt-attention softmax."""
import numba
import numpy as np

from kernels_numba.cpu.ir.fast_exp import exp_f32


@numba.njit
def exp_all(values):
    out = np.empty_like(values)
    for i in range(values.size):
        out[i] = exp_f32(values[i])
    return out


def test_relative_error_is_a_few_ulps_over_the_float32_range():
    values = np.concatenate([np.linspace(-87.0, 88.0, 200_001), [0.0, -1e-8, 1e-8, 0.5, -0.5]]).astype(np.float32)
    expected = np.exp(values.astype(np.float64))
    assert np.max(np.abs(exp_all(values) - expected) / expected) < 3e-7


def test_saturates_instead_of_overflowing():
    got = exp_all(np.array([-np.inf, -1000.0, 1000.0, np.inf], np.float32))
    assert 0.0 < got[0] < 1e-37 and 0.0 < got[1] < 1e-37  # 1 / (1 + exp(-x)) stays finite and exact enough
    assert np.isfinite(got[2:]).all() and got[2] > 1e38
