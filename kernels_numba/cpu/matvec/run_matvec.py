"""out = x @ W.T for weights in the run layout (run_layout.py) with 8-bit activations (run_dot.py), any number of
tokens.

x is quantized as int8_dot does (32 values to a scale), then regrouped like the weights (`run_activations`):
slice j of a group holds values 4j..4j+3 of each run, and each run gets its scale, its lane start
(-zero_point * its quant sum) and its scaled sum (for Q4_K's mins). Row groups of 4 are split across threads.
Tokens go in passes of 8, 4, 2 and 1, each pass one row at a time inside the IR (run_dot.row_range_intrinsic: the
token pointers once per call). A decode batch (under SPAN_PASS_TOKENS) runs each pass over a thread's whole span
of rows; longer inputs (prefill chunks) run them group by group, the row bytes staying in L1 between passes. A
(row, token) dot is the same IR in every pass, so results do not depend on the batch.

Against one call per row (in-process A/B, paired medians, 2 threads): Q5_0 2048x640 1 token 1.77x faster, 8 tokens
1.40x; Q6_K 640x2048 1.37x / 1.19x; Q4_K 640x1024 1.54x / 1.27x. Span passes against the row groups' former
2 rows x 4 tokens pass: 4 tokens 1.18-1.33x, 5 tokens 1.17-1.24x, 12 tokens 1.01-1.15x; with that pass replaced in
the group path too, 20-37 tokens 0.99-1.10x.
"""
import numpy as np
from numba import njit, prange, types

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.aligned_buffer import aligned_int8
from kernels_numba.cpu.matvec.int8_dot import BLOCK_VALUES, LANE_VALUES, PREFETCH_BYTES, quantize_activations
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, chunk_span, pool_threads
from kernels_numba.cpu.ir.native_call import call_native, handle_at, handles_array, native_kernel
from kernels_numba.cpu.matvec.leaf_types import OUT_TYPE, WEIGHTS_TYPE
from kernels_numba.cpu.matvec.run_dot import run_row_range
from kernels_numba.cpu.matvec.run_layout import FOLDED_MAX_RUNS, FOLDED_POSITIONS, RUN_VALUES, ZERO_POINTS, group_runs

ROWS_PER_GROUP = 4
LAYOUT_CODES = tuple(RUN_VALUES)  # the run codes, R_Q5_0 first


@njit(cache=True)
def run_rows_into(code, num_tokens, data, first_row, stop_row, xr, first_token, out, prefetch_bytes):
    """The leaf: rows first_row..stop_row-1 x tokens first_token..+num_tokens-1 (run_dot.run_row_range). Compiled
    per literal (run code, token count) by `run_rows_kernels` and called through its address by the glue below."""
    run_row_range(code, num_tokens, data, first_row, stop_row, xr[0], xr[1], xr[2], xr[3], first_token, out,
                  prefetch_bytes)


PASS_TOKENS = (8, 4, 2, 1)  # the token counts of the passes, in the order of a run code's leaf handles
REGROUPED_TYPE = types.Tuple((types.Array(types.int8, 2, "C"), types.Array(types.float32, 2, "C"),
                              types.Array(types.int32, 2, "C"), types.Array(types.float32, 2, "C")))


def run_rows_kernels(code: int) -> np.ndarray:
    """The leaf handles (ir/native_call.py) of run code `code`, one row per PASS_TOKENS entry."""
    return handles_array([native_kernel(run_rows_into, (types.literal(code), types.literal(num_tokens), WEIGHTS_TYPE,
                                               types.int64, types.int64, REGROUPED_TYPE, types.int64, OUT_TYPE,
                                               types.int64))
                          for num_tokens in PASS_TOKENS])


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
    grouped = aligned_int8(n, k)  # the dots' 64-byte loads of x each within a cache line
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
                    position = FOLDED_POSITIONS[j] if width <= FOLDED_MAX_RUNS else j  # x folded like the weights
                    for b in range(LANE_VALUES):
                        value = quants[t, run * run_length + LANE_VALUES * j + b]
                        grouped[t, base + LANE_VALUES * (width * position + lane) + b] = value
                        total += np.int32(value)
                scale = scales[t, run * run_length // BLOCK_VALUES]
                run_scales[t, run] = scale
                run_starts[t, run] = -zero * total
                run_sums[t, run] = scale * np.float32(total)
            first_run += width
    return grouped, run_scales, run_starts, run_sums


TOKEN_TILE = 32  # tokens a row group serves before the next: their activations stay in L2 (prefill chunks)


@njit(cache=True)
def _passes_into(rows, code, data, xr, out, first_row, stop_row, first_token, stop_token, later_prefetch_bytes):
    """Tokens first_token..stop_token-1 of rows first_row..stop_row-1: passes of 8, then 4, 2 and 1 tokens, each
    over the rows one at a time in one call. The first pass prefetches the row stream; later ones prefetch
    later_prefetch_bytes ahead (0 where the rows stay in L1 between passes)."""
    t = first_token
    prefetch_bytes = PREFETCH_BYTES
    while t + 8 <= stop_token:
        call_native(handle_at(rows, 0), (code, 8, data, first_row, stop_row, xr, t, out, prefetch_bytes))
        t, prefetch_bytes = t + 8, later_prefetch_bytes
    for index in range(1, 4):  # 4, 2, 1: at most one pass each
        if t + PASS_TOKENS[index] <= stop_token:
            call_native(handle_at(rows, index), (code, PASS_TOKENS[index], data, first_row, stop_row, xr, t, out,
                                      prefetch_bytes))
            t, prefetch_bytes = t + PASS_TOKENS[index], later_prefetch_bytes


@njit(cache=True)
def _groups_into(rows, code, data, xr, out, first_group, stop_group):
    num_tokens = xr[0].shape[0]
    if num_tokens < SPAN_PASS_TOKENS:  # a decode batch: each pass sweeps the whole span
        _passes_into(rows, code, data, xr, out, first_group * ROWS_PER_GROUP,
                     min(data.shape[0], stop_group * ROWS_PER_GROUP), 0, num_tokens, PREFETCH_BYTES)
        return
    for first_token in range(0, num_tokens, TOKEN_TILE):
        stop_token = min(num_tokens, first_token + TOKEN_TILE)
        for group in range(first_group, stop_group):  # a group's rows stay in L1 between its passes
            first_row = group * ROWS_PER_GROUP
            _passes_into(rows, code, data, xr, out, first_row, min(data.shape[0], first_row + ROWS_PER_GROUP),
                         first_token, stop_token, 0)


@njit(cache=True, parallel=True)
def _parallel_into(rows, code, data, xr, out, chunks):
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    for chunk in prange(chunks):
        first, stop = chunk_span(chunk, chunks, num_groups)
        _groups_into(rows, code, data, xr, out, first, stop)


@njit(cache=True)
def run_matvec_into(rows, code, data, x, out):
    """out[t] = dot of every row of data (run code `code`, uint8 [rows, bytes]) with x[t] quantized to 8 bits
    (x: float32 [n, k]); rows: run_rows_kernels(code)."""
    quants, scales, _, _ = quantize_activations(x)
    run_matvec_regrouped_into(rows, code, data, run_activations(code, quants, scales), out)


@njit(cache=True)
def run_matvec_regrouped_into(rows, code, data, xr, out):
    """run_matvec_into of activations already in the run code's layout (run_activations): mat-vecs of one code
    that share an input regroup it once."""
    n, k = xr[0].shape
    threads = pool_threads()
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    if threads > 1 and data.shape[0] * k * n >= PARALLEL_MIN_WORK:
        _parallel_into(rows, code, data, xr, out, max(1, min(num_groups, CHUNKS_PER_THREAD * threads)))
    else:
        _groups_into(rows, code, data, xr, out, 0, num_groups)
