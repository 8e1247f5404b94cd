"""out = x @ W.T for weights in the run layout (run_layout.py) with 8-bit activations (run_dot.py), any number of
tokens.

x is quantized as int8_dot does (32 values to a scale), then regrouped like the weights (`run_activations`):
slice j of a group holds values 4j..4j+3 of each run, and each run gets its scale, its lane start
(-zero_point * its quant sum) and its scaled sum (for Q4_K's mins). Row groups of 4 are split across threads;
each group's tokens go in passes of 8 (one row at a time), 4 (two rows: one row was slower, Q5_0 2048x640 0.156
vs 0.114 ms) and 1 (one row at a time: a lone token streams the rows from memory, where this beat four rows
together, Q4_K 36 MB 6.46 -> 4.73 ms), the row bytes staying in L1 between passes. A (row, token) dot is the same
IR in every pass, so results do not depend on the batch.

The one-row passes loop over their rows inside the IR (run_dot.row_range_intrinsic: the token pointers once per
call, not once per row). Against one call per row (in-process A/B, paired medians, 2 threads): Q5_0 2048x640
1 token 1.77x faster, 8 tokens 1.40x; Q6_K 640x2048 1.37x / 1.19x; Q4_K 640x1024 1.54x / 1.27x. A decode batch
(under SPAN_PASS_TOKENS) sweeps its whole span of rows once per pass of 8, 4, 2 and 1 tokens, one row at a time;
against the row groups' passes (2 x 4 tokens): 4 tokens 1.18-1.33x, 5 tokens 1.17-1.24x, 12 tokens 1.01-1.15x.
"""
import numpy as np
from numba import njit, prange

from kernels_numba.cpu import quant_type as qt
from kernels_numba.cpu.int8_dot import BLOCK_VALUES, LANE_VALUES, PREFETCH_BYTES, quantize_activations
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, chunk_span, pool_threads
from kernels_numba.cpu.run_dot import dots_intrinsic, row_range_intrinsic
from kernels_numba.cpu.run_layout import RUN_VALUES, ZERO_POINTS, group_runs

ROWS_PER_GROUP = 4
LAYOUT_CODES = tuple(RUN_VALUES)  # the run codes, R_Q5_0 first


def _dispatch(num_rows, num_tokens):
    q5_0, q4_0, q4_k, q6_k = (dots_intrinsic(code, num_rows, num_tokens) for code in LAYOUT_CODES)

    @njit(inline="always")
    def dots(code, data, ra, rb, rc, rd, xr, t, prefetch_bytes):
        if code == qt.R_Q5_0:
            return q5_0(data, ra, rb, rc, rd, *xr, t, prefetch_bytes)
        if code == qt.R_Q4_0:
            return q4_0(data, ra, rb, rc, rd, *xr, t, prefetch_bytes)
        if code == qt.R_Q4_K:
            return q4_k(data, ra, rb, rc, rd, *xr, t, prefetch_bytes)
        return q6_k(data, ra, rb, rc, rd, *xr, t, prefetch_bytes)
    return dots


_dots2x4 = _dispatch(2, 4)


def _dispatch_range(num_tokens):
    q5_0, q4_0, q4_k, q6_k = (row_range_intrinsic(code, num_tokens) for code in LAYOUT_CODES)

    @njit(inline="always")
    def row_range(code, data, first_row, stop_row, xr, t, out, prefetch_bytes):
        if code == qt.R_Q5_0:
            q5_0(data, first_row, stop_row, *xr, t, out, prefetch_bytes)
        elif code == qt.R_Q4_0:
            q4_0(data, first_row, stop_row, *xr, t, out, prefetch_bytes)
        elif code == qt.R_Q4_K:
            q4_k(data, first_row, stop_row, *xr, t, out, prefetch_bytes)
        else:
            q6_k(data, first_row, stop_row, *xr, t, out, prefetch_bytes)
    return row_range


_rows1, _rows2, _rows4, _rows8 = (_dispatch_range(n) for n in (1, 2, 4, 8))  # one row at a time, n tokens
SPAN_PASS_TOKENS = 16  # below this many tokens (decode batches), passes of 8, 4, 2, 1 each sweep the whole span


# per run code, in the order of quant_type's run codes (R_Q5_0 first): tuples numba reads as constants
assert LAYOUT_CODES == tuple(range(qt.R_Q5_0, qt.R_Q5_0 + len(LAYOUT_CODES)))
_RUN_VALUES = tuple(RUN_VALUES[code] for code in LAYOUT_CODES)
_ZERO_POINTS = tuple(ZERO_POINTS[code] for code in LAYOUT_CODES)


@njit(cache=True, inline="always")
def run_values(code):
    """Values per run (per lane) of a run code."""
    return _RUN_VALUES[code - qt.R_Q5_0]


@njit(cache=True, inline="always")
def zero_point(code):
    """The unsigned quants' offset of a run code (the value is scale * (q - zero point))."""
    return _ZERO_POINTS[code - qt.R_Q5_0]


@njit(cache=True)
def run_activations(code, quants, scales):
    """The 8-bit activations (quants int8 [n, k], scales float32 [n, k/32] of quantize_activations_into) in the
    layout of run code `code`: (quants regrouped [n, k], run scales float32 [n, runs], run starts int32 [n, runs]
    = -zero point * run quant sums, run sums float32 [n, runs] = scale * run quant sum)."""
    n, k = quants.shape
    run_length = run_values(code)
    num_runs = k // run_length
    zero = zero_point(code)
    grouped = np.empty_like(quants)
    run_scales = np.empty((n, num_runs), dtype=np.float32)
    run_starts = np.empty((n, num_runs), dtype=np.int32)
    run_sums = np.empty((n, num_runs), dtype=np.float32)
    for t in range(n):
        first_run = 0
        while first_run < num_runs:
            width = group_runs(num_runs - first_run)
            base = first_run * run_length
            for lane in range(width):
                run = first_run + lane
                total = np.int32(0)
                for j in range(run_length // LANE_VALUES):
                    for b in range(LANE_VALUES):
                        value = quants[t, run * run_length + LANE_VALUES * j + b]
                        grouped[t, base + LANE_VALUES * (width * j + lane) + b] = value
                        total += np.int32(value)
                scale = scales[t, run * run_length // BLOCK_VALUES]
                run_scales[t, run] = scale
                run_starts[t, run] = -zero * total
                run_sums[t, run] = scale * np.float32(total)
            first_run += width
    return grouped, run_scales, run_starts, run_sums


TOKEN_TILE = 32  # tokens a row group serves before the next: their activations stay in L2 (prefill chunks)


@njit(cache=True)
def _group_tokens_into(code, data, xr, out, group, first_token, stop_token):
    """Tokens first_token..stop_token-1 of row group `group`: passes of 8, then 4, then single tokens."""
    last = data.shape[0] - 1
    first_row = group * ROWS_PER_GROUP
    rows = (first_row, min(first_row + 1, last), min(first_row + 2, last), min(first_row + 3, last))
    num_rows = min(ROWS_PER_GROUP, data.shape[0] - first_row)
    t = first_token
    while t + 8 <= stop_token:
        _rows8(code, data, first_row, first_row + num_rows, xr, t, out, PREFETCH_BYTES if t == first_token else 0)
        t += 8
    if t + 4 <= stop_token:
        for pair in range(2):
            ra, rb = rows[2 * pair], rows[2 * pair + 1]
            dots = _dots2x4(code, data, ra, rb, ra, rb, xr, t, PREFETCH_BYTES if t == first_token else 0)
            for token in range(4):
                for g in range(2):
                    if 2 * pair + g < num_rows:
                        out[t + token, first_row + 2 * pair + g] = dots[2 * token + g]
        t += 4
    while t < stop_token:
        _rows1(code, data, first_row, first_row + num_rows, xr, t, out, PREFETCH_BYTES if t == first_token else 0)
        t += 1


@njit(cache=True)
def _span_passes_into(code, data, xr, out, first_row, stop_row, num_tokens):
    """A decode batch: passes of 8, 4, 2 and 1 tokens, each over rows first_row..stop_row-1 in one call."""
    t = 0
    while t + 8 <= num_tokens:
        _rows8(code, data, first_row, stop_row, xr, t, out, PREFETCH_BYTES)
        t += 8
    if t + 4 <= num_tokens:
        _rows4(code, data, first_row, stop_row, xr, t, out, PREFETCH_BYTES)
        t += 4
    if t + 2 <= num_tokens:
        _rows2(code, data, first_row, stop_row, xr, t, out, PREFETCH_BYTES)
        t += 2
    if t < num_tokens:
        _rows1(code, data, first_row, stop_row, xr, t, out, PREFETCH_BYTES)


@njit(cache=True)
def _groups_into(code, data, xr, out, first_group, stop_group):
    num_tokens = xr[0].shape[0]
    first_row, stop_row = first_group * ROWS_PER_GROUP, min(data.shape[0], stop_group * ROWS_PER_GROUP)
    if num_tokens < SPAN_PASS_TOKENS:
        _span_passes_into(code, data, xr, out, first_row, stop_row, num_tokens)
        return
    for first_token in range(0, num_tokens, TOKEN_TILE):
        stop_token = min(num_tokens, first_token + TOKEN_TILE)
        for group in range(first_group, stop_group):
            _group_tokens_into(code, data, xr, out, group, first_token, stop_token)


@njit(cache=True, parallel=True)
def _parallel_into(code, data, xr, out, chunks):
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    for chunk in prange(chunks):
        first, stop = chunk_span(chunk, chunks, num_groups)
        _groups_into(code, data, xr, out, first, stop)


@njit(cache=True)
def run_matvec_into(code, data, x, out):
    """out[t] = dot of every row of data (run code `code`, uint8 [rows, bytes]) with x[t] quantized to 8 bits
    (x: float32 [n, k])."""
    quants, scales, _, _ = quantize_activations(x)
    run_matvec_regrouped_into(code, data, run_activations(code, quants, scales), out)


@njit(cache=True)
def run_matvec_regrouped_into(code, data, xr, out):
    """run_matvec_into of activations already in the run code's layout (run_activations): mat-vecs of one code
    that share an input regroup it once."""
    n, k = xr[0].shape
    threads = pool_threads()
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    if threads > 1 and data.shape[0] * k * n >= PARALLEL_MIN_WORK:
        _parallel_into(code, data, xr, out, max(1, min(num_groups, CHUNKS_PER_THREAD * threads)))
    else:
        _groups_into(code, data, xr, out, 0, num_groups)
