"""out = x @ W.T for weights in the run layout (run_layout.py) with 8-bit activations (run_dot.py), any number of
tokens.

x is quantized as int8_dot does (32 values to a scale), then regrouped like the weights (`run_activations`):
slice j of a group holds values 4j..4j+3 of each run, and each run gets its scale, its lane start
(-zero_point * its quant sum) and its scaled sum (for Q4_K's mins). Row groups of 4 are split into spans (8 a
thread) that the threads take from a shared counter as they go (ir/atomic_counter.py), so a thread that loses its
core leaves its spans to the other. Mat-vecs of one input (the decode layer's q/k/v, gate/up) run in one parallel
region, their spans in proportion to each matrix's bytes (`run_matvecs_regrouped_into`): 5 regions a decode layer
instead of 8.
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
from numba.extending import overload

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.aligned_buffer import aligned_int8
from kernels_numba.cpu.matvec.int8_dot import BLOCK_VALUES, LANE_VALUES, PREFETCH_BYTES, quantize_activations
from kernels_numba.cpu.parallel_policy import PARALLEL_MIN_WORK, chunk_span, pool_threads
from kernels_numba.cpu.ir.atomic_counter import claim_next, new_counter
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


CLAIMED_SPANS_PER_THREAD = 8  # spans of rows a thread takes, one at a time, from a region's shared counter


@njit(cache=True, parallel=True)
def _parallel_into(rows, code, data, xr, out, chunks, workers):
    """The row groups in `chunks` spans, each of `workers` threads taking the next span until none is left
    (atomic_counter)."""
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    counter = new_counter()
    for worker in prange(workers):
        chunk = claim_next(counter)
        while chunk < chunks:
            first, stop = chunk_span(chunk, chunks, num_groups)
            _groups_into(rows, code, data, xr, out, first, stop)
            chunk = claim_next(counter)


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
        chunks = max(1, min(num_groups, CLAIMED_SPANS_PER_THREAD * threads))
        _parallel_into(rows, code, data, xr, out, chunks, min(chunks, threads))
    else:
        _groups_into(rows, code, data, xr, out, 0, num_groups)


MAX_SHARED_MATS = 3  # q/k/v; gate/up pass 2


@njit(cache=True)
def shared_spans(mats, first, count, threads):
    """int64 [spans, 3]: (matrix m, first group, stop group) spans of the row groups of mats[first + m], m < count,
    about CLAIMED_SPANS_PER_THREAD a thread in all, each matrix's share of them in proportion to its bytes."""
    total_bytes = 0
    for m in range(count):
        total_bytes += mats[first + m].size
    counts = np.zeros(count, dtype=np.int64)
    for m in range(count):
        data = mats[first + m]
        num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
        share = (CLAIMED_SPANS_PER_THREAD * threads * data.size + total_bytes // 2) // max(1, total_bytes)
        counts[m] = min(num_groups, max(1, share)) if num_groups else 0
    spans = np.empty((counts.sum(), 3), dtype=np.int64)
    row = 0
    for m in range(count):
        data = mats[first + m]
        num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
        for span in range(counts[m]):
            spans[row, 0] = m
            spans[row, 1], spans[row, 2] = chunk_span(span, counts[m], num_groups)
            row += 1
    return spans


@njit(cache=True, parallel=True)
def _shared_parallel_into(rows, codes, mats, first, xr0, xr1, xr2, outs, spans, workers):
    """rows: int64 [MAX_SHARED_MATS, 4, 2] leaf handles, codes: int64 [MAX_SHARED_MATS], xr0..2 each matrix's
    activations (a parallel loop's body takes no tuples of tuples, nor tuples mixing numbers and arrays)."""
    counter = new_counter()
    for worker in prange(workers):
        span = claim_next(counter)
        while span < spans.shape[0]:
            m = spans[span, 0]
            xr = xr0 if m == 0 else (xr1 if m == 1 else xr2)
            _groups_into(rows[m], codes[m], mats[first + m], xr, outs[m], spans[span, 1], spans[span, 2])
            span = claim_next(counter)


@njit(cache=True)
def run_matvecs_regrouped_into(kernels, mats, first, xrs, outs, count):
    """outs[m] = x @ mats[first + m].T for m < count (<= MAX_SHARED_MATS), every kernels[first + m] a run path
    kernel (path, code, leaf handles), xrs[m] x in that code's layout; outs and xrs padded to MAX_SHARED_MATS (the
    padding is not read). One parallel region for all: the threads take spans of every matrix's rows, in
    proportion to its bytes, until none is left. The same bits as run_matvec_regrouped_into of each."""
    n, k = xrs[0][0].shape
    threads = pool_threads()
    num_rows = 0
    for m in range(count):
        num_rows += mats[first + m].shape[0]
    if threads > 1 and num_rows * k * n >= PARALLEL_MIN_WORK:
        spans = shared_spans(mats, first, count, threads)
        leaves = np.empty((MAX_SHARED_MATS, len(PASS_TOKENS), 2), dtype=np.int64)
        codes = np.empty(MAX_SHARED_MATS, dtype=np.int64)
        for m in range(MAX_SHARED_MATS):  # element by element: an array assignment compiles its shape error
            _, code, handles = kernels[first + min(m, count - 1)]  # message (~7 s of numba's string code)
            codes[m] = code
            for i in range(len(PASS_TOKENS)):
                leaves[m, i, 0], leaves[m, i, 1] = handles[i, 0], handles[i, 1]
        _shared_parallel_into(leaves, codes, mats, first, xrs[0], xrs[1], xrs[2], outs, spans,
                              min(spans.shape[0], threads))
        return
    for m in range(count):
        _, code, handles = kernels[first + m]
        run_matvec_regrouped_into(handles, code, mats[first + m], xrs[m], outs[m])


def padded_to_shared(items, filler):
    """items (a tuple of 1..MAX_SHARED_MATS) + filler up to MAX_SHARED_MATS: one compiled region for 2 and 3 (a
    longer tuple: its first MAX_SHARED_MATS)."""
    return tuple(items) + (filler,) * (MAX_SHARED_MATS - len(items))


@overload(padded_to_shared)
def _padded_to_shared(items, filler):
    count = len(items.types) if isinstance(items, types.BaseTuple) else None
    if count == 3:
        return lambda items, filler: items
    if count is not None and count > 3:  # callers send these elsewhere; typed all the same
        return lambda items, filler: (items[0], items[1], items[2])
    if count == 2:
        return lambda items, filler: (items[0], items[1], filler)
    if count == 1:
        return lambda items, filler: (items[0], filler, filler)
    return None
