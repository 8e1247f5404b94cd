"""The whole-vocabulary softmax draw: the CPU kernel against the numpy reference, and against the exact
distribution (chi-square)."""
import numpy as np
import pytest

from kernels_numba.cpu.softmax_draw import NO_TOKEN, softmax_draw_rows
from kernels_numba.reference_sampling import softmax_draw_rows as reference_draw_rows


def _chi_square_limit(degrees_of_freedom: int, z: float = 3.719) -> float:
    """The chi-square statistic exceeded with probability ~1e-4 (z: the normal quantile), Wilson-Hilferty."""
    k = 2.0 / (9.0 * degrees_of_freedom)
    return degrees_of_freedom * (1.0 - k + z * np.sqrt(k)) ** 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("vocab_size", [7, 1024, 5000])  # under one block, one whole block, a partial last block
def test_draws_equal_the_reference(dtype, vocab_size):
    data = np.random.default_rng(vocab_size)
    logits = (3 * data.standard_normal((6, vocab_size))).astype(dtype)
    logits[1, ::3] = -np.inf  # masked tokens
    logits[2, :] = -np.inf
    logits[2, vocab_size - 1] = 0.5  # the only token left is the last
    logits[3, 2] = np.nan
    logits[4, 0] = np.inf
    row_ids = np.array([0, 1, 2, 3, 4, 5, 0, 1, 5, 5])
    for _ in range(30):
        inverse_temperatures = 1.0 / data.uniform(0.2, 2.0, row_ids.size)
        uniforms = data.random(row_ids.size)
        got = softmax_draw_rows(logits, row_ids, inverse_temperatures, uniforms)
        expected = reference_draw_rows(logits, row_ids, inverse_temperatures, uniforms)
        assert got.tolist() == expected.tolist()
        assert got[3] == got[4] == NO_TOKEN and got[2] == vocab_size - 1
        assert np.isfinite(logits[1, got[[1, 7]]]).all()


def test_draws_at_the_ends_of_u():
    logits = np.full((1, 3000), -np.inf, dtype=np.float32)
    logits[0, [7, 2100, 2500]] = np.log([0.25, 0.5, 0.25])
    uniforms = np.array([0.0, 0.2499, 0.2501, 0.7499, 0.7501, np.nextafter(1.0, 0.0)])
    tokens = softmax_draw_rows(logits, np.zeros(uniforms.size), np.ones(uniforms.size), uniforms)
    assert tokens.tolist() == [7, 7, 2100, 2100, 2500, 2500]  # never a trailing zero weight


def test_bad_shapes_are_refused():
    logits = np.zeros((2, 100), dtype=np.float32)
    with pytest.raises(ValueError, match="row ids must lie"):
        softmax_draw_rows(logits, np.array([2]), np.ones(1), np.zeros(1))
    with pytest.raises(ValueError, match="2 row ids, 1 temperatures"):
        softmax_draw_rows(logits, np.array([0, 1]), np.ones(1), np.zeros(2))
    with pytest.raises(ValueError, match="logits must be"):
        softmax_draw_rows(logits[0], np.array([0]), np.ones(1), np.zeros(1))


def test_all_masked_row_draws_no_token():
    logits = np.full((1, 3000), -np.inf, dtype=np.float32)
    assert softmax_draw_rows(logits, np.zeros(1), np.ones(1), np.full(1, 0.5))[0] == NO_TOKEN


@pytest.mark.parametrize("temperature", [0.7, 1.0, 2.5])
def test_draws_are_exact_softmax_samples(temperature):
    """Chi-square of draws at uniform u against the exact float64 softmax(logits / T) of a vocabulary with a
    partial last block, -inf tokens (never drawn) and very unlikely ones."""
    vocab_size, num_draws = 1100, 40000
    logits = np.random.default_rng(2).normal(0.0, 1.5, vocab_size).astype(np.float32)
    logits[:20] += 4.0  # a few likely tokens
    logits[1030:1040] = -np.inf
    logits[1040:1050] = -60.0
    exact = np.exp((logits.astype(np.float64) - logits.max()) / temperature)
    exact /= exact.sum()
    uniforms = np.random.default_rng(int(10 * temperature)).random(num_draws)
    tokens = softmax_draw_rows(logits[None], np.zeros(num_draws), np.full(num_draws, 1.0 / temperature), uniforms)
    counts = np.bincount(tokens, minlength=vocab_size)
    assert counts[1030:1040].sum() == 0
    likely = exact * num_draws >= 5  # chi-square wants expected counts >= 5: the rest pooled into one bin
    observed = np.append(counts[likely], counts[~likely].sum())
    expected = np.append(exact[likely], exact[~likely].sum()) * num_draws
    statistic = ((observed - expected) ** 2 / expected).sum()
    assert statistic < _chi_square_limit(observed.size - 1)
    assert likely.sum() > 50  # the test has many bins to fail on


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_max_is_nanmax_over_chunks_and_tail(dtype):
    from kernels_numba.cpu.softmax_draw import row_max
    rng = np.random.default_rng(11)
    for size in (1, 5, 63, 64, 65, 200, 1031):
        row = rng.standard_normal(size).astype(dtype)
        row[rng.integers(0, size, max(1, size // 10))] = np.nan
        if size > 3:
            row[-1] = np.nan  # in the tail
            row[size // 2] = 7.5  # the max: in a chunk, or in the tail of a short row
        expected = np.nanmax(row) if not np.isnan(row).all() else None
        got = row_max(row)
        if expected is None:
            assert not np.isfinite(got)
        else:
            assert got == expected
        assert row_max(row[::-1].copy()) == row_max(row) or expected is None
    assert row_max(np.full(130, -np.inf, dtype)) == -np.inf
    assert not np.isfinite(row_max(np.full(130, np.nan, dtype)))
    strided = np.arange(300, dtype=dtype)[::3]  # a view: copied to a contiguous row first
    assert row_max(strided) == 297
