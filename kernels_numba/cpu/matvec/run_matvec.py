"""out = x @ W.T for weights in the run layout (run_layout.py) with 8-bit activations (run_dot.py), any number of
tokens.

x is quantized as int8_dot does (32 values to a scale) and regrouped like the weights, in one pass
(`quantized_run_activations`; `run_activations` regroups quants made apart): slice j of a group holds values
4j..4j+3 of each run, and each run gets its scale, its lane start (-zero_point * its quant sum) and its scaled sum
(for Q4_K's mins). Row groups of 4 are split into spans (8 a
thread; 2 in a decode batch) that the threads take from a shared counter as they go (ir/atomic_counter.py), so a
thread that loses its core leaves its spans to the other. Mat-vecs of one input (the decode layer's q/k/v, gate/up)
run in one parallel region, their spans in proportion to each matrix's bytes (`run_matvecs_regrouped_into`): 5
regions a decode layer instead of 8; gate and up of one code also apply the activation there
(`run_gated_matvecs_into`). A prefill chunk's x is quantized and regrouped on the pool's threads too
(`quantized_run_activations`). Tokens go in passes of 8, 4, 2 and 1 (prefill chunks whose x rows alias in L1: 4,
2, 1), each pass one row at a time inside the IR (run_dot.row_range_intrinsic: the token pointers once per call).
A decode batch (under SPAN_PASS_TOKENS) runs each pass over a thread's whole span of rows (SWEEP_BYTES of them at a
time where it takes more than one pass); longer inputs (prefill chunks) run them group by group, the row bytes
staying in L1 between passes. A (row, token) dot is the same IR in every pass, so results
do not depend on the batch.

Against one call per row (in-process A/B, paired medians, 2 threads): Q5_0 2048x640 1 token 1.77x faster, 8 tokens
1.40x; Q6_K 640x2048 1.37x / 1.19x; Q4_K 640x1024 1.54x / 1.27x. Span passes against the row groups' former
2 rows x 4 tokens pass: 4 tokens 1.18-1.33x, 5 tokens 1.17-1.24x, 12 tokens 1.01-1.15x; with that pass replaced in
the group path too, 20-37 tokens 0.99-1.10x.
"""
import os

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from kernels_numba.cpu.activation import apply_range
from kernels_numba.cpu_tier import cpu_vendor
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.aligned_buffer import aligned_int8
from kernels_numba.cpu.matvec.int8_dot import (BLOCK_VALUES, INF_BITS, LANE_VALUES, PREFETCH_BYTES,
                                              scale_of_abs_max_bits)
from kernels_numba.cpu.ir.quantize_ir import block_abs_max_bits, quantize_block_scattered
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
    """The leaf handles (ir/native_call.py) of run code `code`, one row per PASS_TOKENS entry, then row
    PREFETCH_ROW: (this CPU's one_token_prefetch_bytes(), 0)."""
    return handles_array([native_kernel(run_rows_into, (types.literal(code), types.literal(num_tokens), WEIGHTS_TYPE,
                                               types.int64, types.int64, REGROUPED_TYPE, types.int64, OUT_TYPE,
                                               types.int64))
                          for num_tokens in PASS_TOKENS] + [(one_token_prefetch_bytes(), 0)])


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
    xr = _new_run_activations(code, quants.shape[0], quants.shape[1])
    for t in range(quants.shape[0]):
        _regroup_row_into(code, quants, scales, t, xr)
    return xr


@njit(cache=True, inline="always")
def _new_run_activations(code, n, k):
    num_runs = k // run_values(code)
    return (aligned_int8(n, k),  # the dots' 64-byte loads of x each within a cache line
            np.empty((n, num_runs), dtype=np.float32), np.empty((n, num_runs), dtype=np.int32),
            np.empty((n, num_runs), dtype=np.float32))


@njit(cache=True, inline="always")
def _regroup_row_into(code, quants, scales, t, xr):
    """Row t of run_activations into xr (its four arrays). A run's slice (LANE_VALUES quants) moves as one int32 word
    and each run's quant sum is a loop of its own (a byte at a time with the sum in the scatter loop, LLVM kept
    both scalar). 1 thread, AVX2 tier, AMD EPYC Zen 4, min of 3000: 8 tokens x 576 values 2.00 -> 1.57 us, x 1536
    4.61-4.76 -> 3.54-3.56 us; 1 token x 576 0.32 -> 0.25 us."""
    grouped, run_scales, run_starts, run_sums = xr
    run_length = run_values(code)
    words_per_run = run_length // LANE_VALUES
    num_runs = quants.shape[1] // run_length
    zero = zero_point(code)
    source_row, grouped_row = quants[t], grouped[t]
    source_words, grouped_words = source_row.view(np.int32), grouped_row.view(np.int32)
    first_run = 0
    while first_run < num_runs:
        width = group_runs(num_runs - first_run)
        base_word = first_run * words_per_run
        for lane in range(width):
            run = first_run + lane
            for j in range(words_per_run):
                position = FOLDED_POSITIONS[j] if width <= FOLDED_MAX_RUNS else j  # x folded like the weights
                grouped_words[base_word + width * position + lane] = source_words[run * words_per_run + j]
        first_run += width
    for run in range(num_runs):
        run_values_of = source_row[run * run_length:(run + 1) * run_length]
        total = np.int32(0)
        for i in range(run_length):
            total += np.int32(run_values_of[i])
        scale = scales[t, run * run_length // BLOCK_VALUES]
        run_scales[t, run] = scale
        run_starts[t, run] = -zero * total
        run_sums[t, run] = scale * np.float32(total)


PARALLEL_QUANTIZE_TOKENS = 16  # from this many tokens (prefill chunks), the pool quantizes and regroups x
TOKENS_PER_CLAIM = 4  # tokens a thread takes at a time from the shared counter there
BLOCK_WORDS = BLOCK_VALUES // LANE_VALUES  # int32 words of a block's quants


@njit(cache=True, inline="always")
def _block_word_offsets_into(code, width, offsets):
    """offsets[i]: where word i of a block's quants goes in a group of `width` runs, from the word of the group's
    first run's first slice plus the block's first lane (run_activations' places: slice j of lane r at word
    width * position(j) + r; a run of 16 values (Q6_K) takes 4 words, so a block's words 4..7 are the next lane's)."""
    words_per_run = run_values(code) // LANE_VALUES
    for i in range(BLOCK_WORDS):
        j = i % words_per_run
        position = FOLDED_POSITIONS[j] if width <= FOLDED_MAX_RUNS else j  # x folded like the weights
        offsets[i] = width * position + i // words_per_run


@njit(cache=True, inline="always")
def _quantize_regroup_row_into(code, x, t, xr, offsets):
    """Row t of quantized_run_activations: each 32-value block quantized as quantize_activations does (the same
    quants and scales) and its words stored straight at their places in the run layout, with its runs' scales,
    starts and sums; no 8-bit row in between. offsets: int64 scratch of BLOCK_WORDS."""
    grouped, run_scales, run_starts, run_sums = xr
    row = np.ascontiguousarray(x[t])  # a no-op for C arrays (a copy of a strided row)
    words = grouped[t].view(np.int32)
    run_length = run_values(code)
    runs_per_block = BLOCK_VALUES // run_length
    words_per_run = run_length // LANE_VALUES
    num_runs = row.size // run_length
    zero = zero_point(code)
    first_run = 0
    while first_run < num_runs:
        width = group_runs(num_runs - first_run)
        _block_word_offsets_into(code, width, offsets)
        for lane in range(0, width, runs_per_block):
            run = first_run + lane
            first = run * run_length
            abs_max_bits = block_abs_max_bits(row, first)
            scale, inverse = scale_of_abs_max_bits(abs_max_bits)
            base = first_run * words_per_run + lane
            if abs_max_bits < INF_BITS:
                low, high = quantize_block_scattered(row, first, inverse, words, base, offsets)
            else:  # an inf or NaN: quants 0 (quantize_activations' too), scale NaN
                low, high = np.int32(0), np.int32(0)
                for i in range(BLOCK_WORDS):
                    words[base + offsets[i]] = 0
            for r in range(runs_per_block):  # (the stores written out here: a helper taking the arrays cost
                # a reference count increment and decrement a block)
                total = low + high if runs_per_block == 1 else (low if r == 0 else high)
                run_scales[t, run + r] = scale
                run_starts[t, run + r] = -zero * total
                run_sums[t, run + r] = scale * np.float32(total)
        first_run += width


@njit(cache=True)
def quantized_run_activations(code, x):
    """run_activations(code, quants, scales) of x quantized to 8 bits (quantize_activations), the same four arrays
    in one pass over x (_quantize_regroup_row_into); a prefill chunk's tokens on the pool's threads, taken
    TOKENS_PER_CLAIM at a time from a shared counter (the same bits: each token's row is quantized and regrouped
    alone). Against quantize_activations then run_activations (1 thread, AVX2 tier, Intel Xeon with AMX, min of
    15 x 2000 calls): 8 tokens x 1536 values 10.05 -> 5.48 us, x 576 4.57 -> 2.49 us; 1 token x 576 0.78 -> 0.43 us
    (a decode step of SmolLM2 quantizes 4 inputs a layer: ~0.3 ms less in an 8-sequence step of ~13 ms)."""
    n, k = x.shape
    xr = _new_run_activations(code, n, k)
    threads = pool_threads()
    if threads < 2 or n < PARALLEL_QUANTIZE_TOKENS:
        offsets = np.empty(BLOCK_WORDS, dtype=np.int64)
        for t in range(n):
            _quantize_regroup_row_into(code, x, t, xr, offsets)
        return xr
    claims = (n + TOKENS_PER_CLAIM - 1) // TOKENS_PER_CLAIM
    _quantize_regroup_parallel(code, x, xr[0], xr[1], xr[2], xr[3], min(threads, claims))
    return xr


@njit(cache=True, nogil=True, parallel=True)
def _quantize_regroup_parallel(code, x, grouped, run_scales, run_starts, run_sums, workers):
    """quantized_run_activations' region: each of `workers` threads takes the next TOKENS_PER_CLAIM tokens until
    none is left (a parallel loop's body takes no tuples of arrays: the four outputs apart)."""
    n = x.shape[0]
    counter = new_counter()
    for worker in prange(workers):
        offsets = np.empty(BLOCK_WORDS, dtype=np.int64)
        first = claim_next(counter) * TOKENS_PER_CLAIM
        while first < n:
            for t in range(first, min(n, first + TOKENS_PER_CLAIM)):
                _quantize_regroup_row_into(code, x, t, (grouped, run_scales, run_starts, run_sums), offsets)
            first = claim_next(counter) * TOKENS_PER_CLAIM


TOKEN_TILE = 32  # tokens a row group serves before the next: their activations stay in L2 (prefill chunks)


# How far ahead in the row stream a pass that reads the rows from memory prefetches. A 1-token pass (decode) on an
# AMD Zen 4 ran fastest with none ahead (0: the lines it reads anyway; the hardware prefetcher keeps up): 1B shape,
# every matrix of a token (16 layers + LM head, 800 MB), 1-token leaf, in-process alternation (load 3-4): native 1
# thread 1.16-1.19x faster than 10 KiB ahead (1 KiB 0.90x, 4 KiB 0.93x of 0), 2 threads 1.17-1.20x (wall, median
# of 10); AVX2 tier 1.08x / 1.01x. On an Intel Xeon (AMX, 2 vCPUs) the same stream ran faster with it: SmolLM2's 211
# matrices (96 MB), 1-token leaf, in-process alternation, against 0: AVX2 tier 1 thread 2 KiB / 4 KiB 1.20x, 2
# threads 1.30x / 1.26x; native 1 thread 1.23x / 1.26x, 2 threads 1.26x / 1.32x (10 KiB 1.35x). So the distance is
# the CPU's (one_token_prefetch_bytes, read once a process into the run leaves' handles: a per-tier kernel cache
# serves both vendors). Wider passes do more work a byte and need the distance: 8 tokens 0.75x of 10 KiB with 0,
# 2 tokens 1.10x with 4 KiB.
INTEL_ONE_TOKEN_PREFETCH_BYTES = 4096
PREFETCH_ROW = len(PASS_TOKENS)  # the row of run_rows_kernels' handles that holds the 1-token prefetch distance


def one_token_prefetch_bytes() -> int:
    """Bytes ahead a 1-token pass prefetches on this CPU: INTEL_ONE_TOKEN_PREFETCH_BYTES on Intel CPUs, 0 elsewhere
    (AMD measured; unmeasured vendors keep what the hardware prefetcher does); POCKET_DECODE_PREFETCH_BYTES sets it
    (to measure another CPU)."""
    setting = os.environ.get("POCKET_DECODE_PREFETCH_BYTES", "").strip()
    if setting.isdigit():
        return int(setting)
    return INTEL_ONE_TOKEN_PREFETCH_BYTES if cpu_vendor() == "GenuineIntel" else 0


@njit(cache=True, inline="always")
def _streaming_prefetch_bytes(rows, width):
    """The prefetch distance of a pass of `width` tokens that streams the rows from memory."""
    return rows[PREFETCH_ROW, 0] if width == 1 else PREFETCH_BYTES


@njit(cache=True)
def _passes_into(rows, code, data, xr, out, first_row, stop_row, first_token, stop_token, later_passes_stream,
                 widest):
    """Tokens first_token..stop_token-1 of rows first_row..stop_row-1: passes of PASS_TOKENS[widest] tokens while
    they fit, then of the narrower ones (at most one each), each pass over the rows one at a time in one call. The
    first pass prefetches the row stream (_streaming_prefetch_bytes); later ones too if later_passes_stream, else
    they prefetch nothing ahead (the rows stay in L1 between passes)."""
    t = first_token
    is_first = True
    for index in range(widest, len(PASS_TOKENS)):
        width = PASS_TOKENS[index]
        while t + width <= stop_token:
            prefetch_bytes = _streaming_prefetch_bytes(rows, width) if is_first or later_passes_stream else 0
            call_native(handle_at(rows, index), (code, width, data, first_row, stop_row, xr, t, out, prefetch_bytes))
            t, is_first = t + width, False


# x rows (k bytes) a multiple of 4 KiB apart fall in one L1 set: 8 tokens' rows overflow its 8 ways. Where a row
# group's bytes leave room in L1 beside 4 tokens of x, prefill passes take 4 tokens. 8B shape, k = 4096, one
# thread, 256 tokens (Zen 4, min of 5): native Q4_K 14336 rows 60-61 -> 73-85 GMAC/s, 1024 rows 55-69 -> 72-88,
# Q6_K 1024 rows 56-59 -> 68; AVX2 tier Q4_K 14336 rows 32-34 -> 51-54, 4096 rows 32-35 -> 46-54, Q6_K 26 -> 34.
# k = 2048, 8192 and 14336 keep 8 (native: 4 was 2-12 % slower there)
ALIASED_X_BYTES = 4096
NARROW_PASS_GROUP_BYTES = 16 * 1024


@njit(cache=True)
def _widest_prefill_pass(data, k):
    """The index in PASS_TOKENS of a prefill chunk's widest pass."""
    if k % ALIASED_X_BYTES == 0 and ROWS_PER_GROUP * data.shape[1] <= NARROW_PASS_GROUP_BYTES:
        return 1
    return 0


# A decode batch of more than one pass (5 tokens: 4 + 1, 12: 8 + 4) sweeps this many bytes of rows with every pass
# before the next rows, so its later passes read them from L2: swept whole, a big LM head streamed from memory once
# a pass (Gemma 3's 262144 x 640 Q8_0 head, 2 threads, Intel Xeon: 8 tokens 8.96 ms, 9 tokens 14.7, 12 tokens 17.9,
# 16 tokens in the row-group path 15.4)
SWEEP_BYTES = 128 * 1024


@njit(cache=True, inline="always")
def _is_one_pass(num_tokens):
    """Whether num_tokens tokens take a single pass (a PASS_TOKENS width)."""
    for width in PASS_TOKENS:
        if num_tokens == width:
            return True
    return False


@njit(cache=True)
def _groups_into(rows, code, data, xr, out, first_group, stop_group):
    num_tokens, k = xr[0].shape
    # runtime values, not literals, in both calls of _passes_into: one compile of it (numba compiles a callee
    # again for each set of literal arguments it is given)
    is_decode = num_tokens < SPAN_PASS_TOKENS
    if is_decode:  # a decode batch: each pass sweeps the span, SWEEP_BYTES of rows at a time (later passes stream)
        first_row, stop_row = first_group * ROWS_PER_GROUP, min(data.shape[0], stop_group * ROWS_PER_GROUP)
        sweep_rows = stop_row - first_row if _is_one_pass(num_tokens) else max(1, SWEEP_BYTES // data.shape[1])
        for sweep_first in range(first_row, stop_row, sweep_rows):
            _passes_into(rows, code, data, xr, out, sweep_first, min(stop_row, sweep_first + sweep_rows),
                         np.int64(0), num_tokens, is_decode, np.int64(0))
        return
    widest = _widest_prefill_pass(data, k)
    for first_token in range(0, num_tokens, TOKEN_TILE):
        stop_token = min(num_tokens, first_token + TOKEN_TILE)
        for group in range(first_group, stop_group):  # a group's rows stay in L1 between its passes
            first_row = group * ROWS_PER_GROUP
            _passes_into(rows, code, data, xr, out, first_row, min(data.shape[0], first_row + ROWS_PER_GROUP),
                         first_token, stop_token, is_decode, widest)


@njit(cache=True)
def _gated_groups_into(rows, code, gate, up, xr, gate_out, up_out, activation, first_group, stop_group):
    """Row groups first_group..stop_group-1 of gate and of up, then gate_out = activation(gate_out) * up_out on
    those rows of every token (activation.apply_range: the same floats as over the whole rows at once)."""
    _groups_into(rows, code, gate, xr, gate_out, first_group, stop_group)
    _groups_into(rows, code, up, xr, up_out, first_group, stop_group)
    first_row, stop_row = first_group * ROWS_PER_GROUP, min(gate.shape[0], stop_group * ROWS_PER_GROUP)
    for t in range(gate_out.shape[0]):
        apply_range(activation, gate_out[t], up_out[t], np.float32(0.0), gate_out[t], first_row, stop_row)


NO_ACTIVATION = -1  # a plain mat-vec: no up rows, no activation


@njit(cache=True, inline="always")
def _span_into(rows, code, data, up, xr, out, up_out, activation, first_group, stop_group):
    """Row groups first_group..stop_group-1 of a plain mat-vec (activation NO_ACTIVATION: up and up_out are not
    read) or of a gated one (_gated_groups_into)."""
    if activation == NO_ACTIVATION:
        _groups_into(rows, code, data, xr, out, first_group, stop_group)
    else:
        _gated_groups_into(rows, code, data, up, xr, out, up_out, activation, first_group, stop_group)


CLAIMED_SPANS_PER_THREAD = 8  # spans of rows a thread takes, one at a time, from a region's shared counter
# ... in a decode batch (under SPAN_PASS_TOKENS tokens): each span is a pass of its own over rows streamed from
# memory, and every span start costs ~0.3-0.6 us more than the rows it holds (a thread's range cut into 8
# contiguous pieces measured as slow as 8 spans claimed anywhere). SmolLM2 decode layers (30), 2 threads, spans a
# thread 8 -> 2 -> 1, in-process alternation, Intel Xeon (AMX, 2 vCPUs): AVX2 tier 8 sequences 12.75 -> 11.69
# -> 11.62 ms, 1 sequence 5.89 -> 5.25 -> 5.03 ms; native tier 9.68 -> 9.05 -> 8.89 / 4.79 -> 4.37 -> 4.16 ms
# (AMD EPYC Zen 4: 2 a thread within noise of 8). Two, not one: a thread that loses its core for a while still
# leaves half of its share to the other.
DECODE_SPANS_PER_THREAD = 2


@njit(cache=True, inline="always")
def spans_per_thread(num_tokens):
    """Spans a thread takes in a region of num_tokens tokens."""
    return DECODE_SPANS_PER_THREAD if num_tokens < SPAN_PASS_TOKENS else CLAIMED_SPANS_PER_THREAD


@njit(cache=True, nogil=True, parallel=True)
def _parallel_into(rows, code, data, up, xr, out, up_out, activation, chunks, workers):
    """The row groups in `chunks` spans, each of `workers` threads taking the next span until none is left
    (atomic_counter), each span by _span_into."""
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    counter = new_counter()
    for worker in prange(workers):
        chunk = claim_next(counter)
        while chunk < chunks:
            first, stop = chunk_span(chunk, chunks, num_groups)
            _span_into(rows, code, data, up, xr, out, up_out, activation, first, stop)
            chunk = claim_next(counter)


@njit(cache=True, nogil=True)  # called from Python too (dispatch.linear_rows_into): the GIL stays free
def run_matvec_into(rows, code, data, x, out):
    """out[t] = dot of every row of data (run code `code`, uint8 [rows, bytes]) with x[t] quantized to 8 bits
    (x: float32 [n, k]); rows: run_rows_kernels(code)."""
    run_matvec_regrouped_into(rows, code, data, quantized_run_activations(code, x), out)


@njit(cache=True)
def run_matvec_regrouped_into(rows, code, data, xr, out):
    """run_matvec_into of activations already in the run code's layout (run_activations): mat-vecs of one code
    that share an input regroup it once."""
    _spans_into(rows, code, data, data, xr, out, out, np.int64(NO_ACTIVATION))


@njit(cache=True)
def _spans_into(rows, code, data, up, xr, out, up_out, activation):
    """_span_into over all of data's row groups: on the pool in claimed spans where the work (rows x k x tokens, up's
    rows too when gated) is worth waking it, else on this thread."""
    n, k = xr[0].shape
    threads = pool_threads()
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    num_mats = 1 if activation == NO_ACTIVATION else 2
    if threads > 1 and num_mats * data.shape[0] * k * n >= PARALLEL_MIN_WORK:
        chunks = max(1, min(num_groups, spans_per_thread(n) * threads))
        _parallel_into(rows, code, data, up, xr, out, up_out, activation, chunks, min(chunks, threads))
    else:
        _span_into(rows, code, data, up, xr, out, up_out, activation, np.int64(0), num_groups)


MAX_SHARED_MATS = 3  # q/k/v; gate/up pass 2


@njit(cache=True)
def shared_spans(mats, first, count, num_spans):
    """int64 [spans, 3]: (matrix m, first group, stop group) spans of the row groups of mats[first + m], m < count,
    about num_spans in all, each matrix's share of them in proportion to its bytes (at least one each)."""
    total_bytes = 0
    for m in range(count):
        total_bytes += mats[first + m].size
    counts = np.zeros(count, dtype=np.int64)
    for m in range(count):
        data = mats[first + m]
        num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
        share = (num_spans * data.size + total_bytes // 2) // max(1, total_bytes)
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


@njit(cache=True, nogil=True, parallel=True)
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
        spans = shared_spans(mats, first, count, spans_per_thread(n) * threads)
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


@njit(cache=True)
def run_gated_matvecs_into(rows, code, gate, up, x, gate_out, up_out, activation):
    """gate_out = activation(x @ gate.T) * (x @ up.T) and up_out = x @ up.T, for gate and up of one run code and
    shape (rows: their leaf handles), x quantized and regrouped once. Each thread applies the activation to the
    rows it has just multiplied, while they are in its cache, instead of one thread over all of them after the
    region (the decode layer's feed-forward: that pass read half its rows from the other core's cache). The same
    bits as run_matvec_into of each and activation.apply_range over the rows."""
    _spans_into(rows, code, gate, up, quantized_run_activations(code, x), gate_out, up_out, activation)
