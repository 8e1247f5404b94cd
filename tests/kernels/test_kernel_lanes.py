import numpy as np
from numba import njit

from kernels_numba.cpu.ir.lanes import lane_sum, zeroed_lanes


@njit
def _accumulate_and_sum(values):
    lanes = zeroed_lanes(64)
    for j in range(values.size):
        lanes[j % 64] += values[j]
    return lane_sum(lanes, 0, 32), lane_sum(lanes, 32, 32), lane_sum(lanes, 0, 64)


@njit
def _fresh_lanes_sum():
    return lane_sum(zeroed_lanes(16), 0, 16)


def test_stack_lanes_start_at_zero_and_sum_like_numpy():
    values = np.random.default_rng(0).standard_normal(640).astype(np.float32)
    lanes = values.astype(np.float64).reshape(-1, 64).sum(axis=0)
    first, second, total = _accumulate_and_sum(values)
    np.testing.assert_allclose([first, second, total], [lanes[:32].sum(), lanes[32:].sum(), lanes.sum()],
                               rtol=1e-5, atol=1e-5)
    assert _fresh_lanes_sum() == 0.0


def test_lane_sum_propagates_nan_and_infinity():
    values = np.zeros(64, np.float32)
    values[3] = np.inf
    assert _accumulate_and_sum(values)[2] == np.inf
    values[40] = np.nan
    assert np.isnan(_accumulate_and_sum(values)[2])
