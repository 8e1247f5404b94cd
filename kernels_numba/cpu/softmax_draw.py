"""Inverse-CDF draws from softmax(logits / temperature) over a whole vocabulary, one row per thread.

Per row: one pass for the largest logit, one pass making the unnormalised weights exp((logit - max) / T) a block
of DRAW_BLOCK at a time (float32, vectorised exp_f32, kept in an L1-sized buffer) and summing each block in
float64, then a walk over the block sums and a second making of the one block the draw lands in. The weights
are never stored whole and never normalised: u scales their total instead.

A row's token depends only on its logits, temperature and u, never on the batch it is drawn in: each row runs
the same sequential code on its own thread, whatever the number of rows or threads.
"""
import numpy as np
from numba import njit, prange

from kernels_numba.cpu.ir.fast_exp import exp_f32
from kernels_numba.cpu.parallel_policy import use_threads
from kernels_numba.cpu.ir.vector_max import chunked_max

DRAW_BLOCK = 1024  # weights summed per block sum; the draw makes one block's weights again
LOWEST_EXPONENT = np.float32(-87.3)  # exp_f32's floor: weights below exp(-87.3) ~ 1e-38 of the largest are 0
NO_TOKEN = -1  # a row with a NaN or +inf logit, or every logit -inf


@njit(cache=True, nogil=True, error_model="numpy")
def row_max(row):
    """The largest value of row, NaN ignored (not finite when every value is NaN): vector_max.chunked_max over
    the whole chunks, the few values after them here."""
    values = np.ascontiguousarray(row)
    top, num_full = chunked_max(values)
    for i in range(num_full, values.size):
        if values[i] > top or top != top:
            top = values[i]
    return top


# contract: FMAs in exp_f32's range reduction and polynomial (as accurate or more); no reassociation, which could
# fold Cody-Waite's two-part ln2 back into one
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def block_weights_into(row, first, stop, top, inverse_temperature, weights):
    """weights[:stop - first] = exp((row[first:stop] - top) * inverse_temperature) in float32, 0 below
    LOWEST_EXPONENT (-inf logits included), NaN for a NaN logit (exp_f32's max/min keep a NaN first argument).
    top: the row's finite max, so every other exponent is <= 0."""
    # slices indexed from 0: a loop index numba cannot prove >= 0 gets a wraparound fix-up, and stays scalar
    values = row[first:stop]
    for i in range(values.size):
        exponent = np.float32((values[i] - top) * inverse_temperature)
        weights[i] = np.float32(0.0) if exponent < LOWEST_EXPONENT else exp_f32(exponent)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def float64_sum(weights, count):
    """weights[0] + ... + weights[count - 1] in float64; reassociated into SIMD lanes, the same order every call."""
    values = weights[:count]
    total = 0.0
    for i in range(values.size):
        total += values[i]
    return total


@njit(cache=True, nogil=True, error_model="numpy")
def draw_row(row, inverse_temperature, u):
    """The token of one row (see softmax_draw_rows), or NO_TOKEN."""
    top = row_max(row)
    if not np.isfinite(top):
        return NO_TOKEN
    num_blocks = (row.size + DRAW_BLOCK - 1) // DRAW_BLOCK
    weights = np.empty(DRAW_BLOCK, dtype=np.float32)
    block_sums = np.empty(num_blocks, dtype=np.float64)
    for block in range(num_blocks):
        first = block * DRAW_BLOCK
        stop = min(row.size, first + DRAW_BLOCK)
        block_weights_into(row, first, stop, top, inverse_temperature, weights)
        block_sums[block] = float64_sum(weights, stop - first)
    total = 0.0
    for block in range(num_blocks):
        total += block_sums[block]
    if not total > 0.0:  # a NaN logit made a NaN weight
        return NO_TOKEN
    target = u * total
    # the first block whose running end exceeds the target; the last non-empty one if u * total rounded up
    block, mass_before, last_nonempty = num_blocks, 0.0, 0
    for b in range(num_blocks):
        if block_sums[b] > 0.0:
            last_nonempty = b
        if mass_before + block_sums[b] > target:
            block = b
            break
        mass_before += block_sums[b]
    if block == num_blocks:
        block, mass_before = last_nonempty, 0.0
        for b in range(block):
            mass_before += block_sums[b]
    first = block * DRAW_BLOCK
    stop = min(row.size, first + DRAW_BLOCK)
    block_weights_into(row, first, stop, top, inverse_temperature, weights)
    running, last_nonzero = mass_before, 0
    for i in range(stop - first):
        if weights[i] > 0.0:
            last_nonzero = i
        running += weights[i]
        if running > target:
            return first + i
    return first + last_nonzero  # the block's running sum rounded below its lane sum


@njit(cache=True, nogil=True, error_model="numpy")
def draw_rows_serial(logits, row_ids, inverse_temperatures, uniforms, out):
    for i in range(row_ids.size):
        out[i] = draw_row(logits[row_ids[i]], inverse_temperatures[i], uniforms[i])


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def draw_rows_parallel(logits, row_ids, inverse_temperatures, uniforms, out):
    for i in prange(row_ids.size):
        out[i] = draw_row(logits[row_ids[i]], inverse_temperatures[i], uniforms[i])


def softmax_draw_rows(logits: np.ndarray, row_ids: np.ndarray, inverse_temperatures: np.ndarray,
                      uniforms: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """kernels_numba.reference_sampling.softmax_draw_rows: out[i] is the token drawn from
    softmax(logits[row_ids[i]] * inverse_temperatures[i]) at uniforms[i], or NO_TOKEN (-1). logits: [rows, vocab]
    float32 or float64; the weights are float32 (relative error ~1e-7), their sums float64."""
    logits = np.ascontiguousarray(logits)
    if logits.dtype not in (np.float32, np.float64):
        logits = logits.astype(np.float32)
    row_ids = np.ascontiguousarray(row_ids, dtype=np.int64)
    inverse_temperatures = np.ascontiguousarray(inverse_temperatures, dtype=logits.dtype)
    uniforms = np.ascontiguousarray(uniforms, dtype=np.float64)
    _check_shapes(logits, row_ids, inverse_temperatures, uniforms)
    out = np.empty(row_ids.size, dtype=np.int64) if out is None else out
    if row_ids.size > 1 and use_threads(row_ids.size * logits.shape[1]):
        draw_rows_parallel(logits, row_ids, inverse_temperatures, uniforms, out)
    else:
        draw_rows_serial(logits, row_ids, inverse_temperatures, uniforms, out)
    return out


def _check_shapes(logits, row_ids, inverse_temperatures, uniforms) -> None:
    """The compiled loops index without bounds checks: refuse what would read outside the arrays."""
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise ValueError(f"softmax_draw_rows: logits must be [rows, vocab > 0], got shape {logits.shape}")
    if not row_ids.size == inverse_temperatures.size == uniforms.size:
        raise ValueError(f"softmax_draw_rows: {row_ids.size} row ids, {inverse_temperatures.size} temperatures "
                         f"and {uniforms.size} uniforms")
    if row_ids.size and not (0 <= row_ids.min() and row_ids.max() < logits.shape[0]):
        raise ValueError(f"softmax_draw_rows: row ids must lie in [0, {logits.shape[0]})")
