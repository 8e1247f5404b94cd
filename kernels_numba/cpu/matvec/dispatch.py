"""Which kernel serves `linear`: one table of paths and thresholds, chosen by (quant type, token count, CPU tier).

| path     | serves                                                   | quant types                        | tokens |
|----------|----------------------------------------------------------|------------------------------------|--------|
| f32_blas | numpy matmul on the float32 rows                         | F32                                | any    |
| run      | 8-bit dots on the run layout (run_matvec.py)             | Q4_0/1 Q5_0 Q4_K Q6_K Q8_0         | any    |
| amx      | AMX tiles on 8-bit activations (amx_matvec.py)           | Q8_0 rows with no run layout, AMX  | <= 48  |
| int8     | 8-bit dots on the GGUF rows (int8_matvec.py)             | Q8_0 Q5_0 Q4_0 Q6_K Q4_K           | <= 48  |
| batch    | float32 register tiles, one decode per block (batch_dot) | BATCH_CODES                        | 2-12   |
| fused    | float32 fused dot, one row group at a time (matmul)      | every type                         | <= 8/12|
| tiled    | tile decode + BLAS sgemm on every thread (tile_gemm)     | GGUF types (run: forced only)      | longer |

The 8-bit paths run where the CPU has integer byte dots (ir/byte_dot.py: tiers amx, avx512, avxvnni, avx2); on the
generic tier the float paths serve every token count. Types in the run layout take the run dots at every token count
(prefill chunks too); where a token count falls past the GGUF-order int8 path, tiled multiplies the activations
rounded to the same 8-bit grid, so prefill and decode see the same inputs.

Each path but f32_blas is glue compiled once for every type around a leaf kernel compiled per quant type (or run
code) on first use and called through its address (ir/native_call.py): a model compiles the leaves of its own
types and paths only, and no leaf is optimised again by the glue above it. `LinearKernel` (path, code, leaf
handles) is what the glue takes, from Python (`linear`) and from the fused decode layer. `forced_path` makes every
call take one path (tests check each path against the numpy reference).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.activation import apply_range
from kernels_numba.cpu.dequant import decode_rows_kernel, readonly_bytes
from kernels_numba.cpu.ir.amx_tiles import AMX_IS_AVAILABLE
from kernels_numba.cpu.ir.native_call import NO_KERNEL, handles_array
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec import run_layout
from kernels_numba.cpu.matvec.amx_matvec import amx_matvec_into
from kernels_numba.cpu.matvec.batch_dot import BATCH_CODES, batch_kernel, batch_matvec_into
from kernels_numba.cpu.matvec.blas import find_sgemm
from kernels_numba.cpu.ir.byte_dot import HAS_FAST_BYTE_DOT
from kernels_numba.cpu.matvec.int8_dot import quantize_activations, round_activations
from kernels_numba.cpu.matvec.int8_matvec import (INT8_CODES, groups_kernel, int8_matvec_into,
                                                  int8_matvec_quantized_into)
from kernels_numba.cpu.matvec.matmul import TILE_BYTES, fused_kernel, matvec_into, untiled_matmul_into
from kernels_numba.cpu.matvec.run_matvec import (MAX_SHARED_MATS, padded_to_shared, quantized_run_activations,
                                                 run_gated_matvecs_into, run_matvec_into,
                                                 run_matvec_regrouped_into, run_matvecs_regrouped_into,
                                                 run_rows_kernels)
from kernels_numba.cpu.matvec.tile_gemm import tiled_kernel, tiled_matmul_into
from kernels_numba.cpu.parallel_policy import PARALLEL_MIN_WORK, use_threads

RUN, AMX, INT8, BATCH, FUSED, TILED, F32_BLAS = range(7)
PATH_NAMES = ("run", "amx", "int8", "batch", "fused", "tiled", "f32_blas")

# thresholds: most tokens each path serves before the next one down the table wins (measured on 2 threads)
# the run dots serve every token count: prefill chunks too. Against tile decode + BLAS at 512 tokens, 2 threads
# (Zen 4, loaded box, min of 5): 1B-shape Q4_K 8192x2048 220 vs 920 ms, Q6_K 2048x8192 280 vs 977 ms, Q4_K
# 2048x2048 55 vs 204 ms; at the avx2 tier 193 vs 497, 284 vs 535, 48 vs 128 ms
MAX_RUN_TOKENS = 64  # the most tokens the fused decode layer serves in one call with run codes (decode batches)
MAX_INT8_TOKENS = 48  # GGUF-order 8-bit dots, 4 tokens a pass: Q5_0 2048x640 n=32 1.10 vs 1.62 ms, n=64 2.18/2.05
MAX_BATCH_TOKENS = 12  # speculative verify sends up to k + 1 = 12 tokens; float register tiles up to there
MAX_FUSED_TOKENS = 8  # fused beats tile decode + BLAS up to ~8 tokens (LM head n=4: 76 vs 92 ms)
MAX_FUSED_TOKENS_PAIRED = 12  # Q8_0/Q5_0 dot token pairs: fused still wins at 9-12 (LM head n=9: 73 vs 208 ms)
# FP8 weights (HF checkpoints, fp8.fp8_linear): 4096x4096, one thread: fused 23 ms vs tiles 33 at 12 tokens, even
# at 16; tiles win at 24
MAX_FP8_FUSED_TOKENS = 12

# 8-bit activations where the CPU has integer dot instructions (int8_dot.py): ~2x the float kernels' rate and
# llama.cpp's numerics; without VNNI the float kernels are faster and exact
USE_INT8_DOT = HAS_FAST_BYTE_DOT
# weights regrouped for the run dots (run_layout.py) where the 8-bit dots run; POCKET_RUN_LAYOUT=0 keeps the GGUF
# order (A/B benchmarks of the two layouts)
USE_RUN_LAYOUT = USE_INT8_DOT and os.environ.get("POCKET_RUN_LAYOUT", "1") != "0"

_forced = threading.local()


def uses_int8_dot(code: int, num_tokens: int) -> bool:
    """Whether the 8-bit dots (run, amx or int8) serve this type and token count."""
    if code >= qt.R_Q5_0:
        return True
    return USE_INT8_DOT and code in INT8_CODES and num_tokens <= MAX_INT8_TOKENS


def rounds_activations(code: int) -> bool:
    """Whether this type's mat-vecs see 8-bit activations (so its tiled path rounds x to that grid too)."""
    return code >= qt.R_Q5_0 or USE_INT8_DOT and code in INT8_CODES


def max_fused_tokens(code: int) -> int:
    """Most tokens a path without BLAS serves (speculative verify sends k+1; the fused decode layer's limit)."""
    if code >= qt.R_Q5_0:
        return MAX_RUN_TOKENS
    if uses_int8_dot(code, 1):
        return MAX_INT8_TOKENS
    return MAX_FUSED_TOKENS_PAIRED if code == qt.Q8_0 or code == qt.Q5_0 else MAX_FUSED_TOKENS


def serves(path: int, code: int) -> bool:
    """Whether `path` can run weights of type `code` at all (whatever the token count)."""
    if path == F32_BLAS:
        return code == qt.F32
    if path == RUN:
        return code >= qt.R_Q5_0
    if path == AMX:
        return AMX_IS_AVAILABLE and code == qt.Q8_0
    if path == INT8:
        return code in INT8_CODES
    if path == BATCH:
        return code in BATCH_CODES
    return code < qt.R_Q5_0 or path == TILED  # fused: the GGUF types; tiled decodes run rows too


def choose_path(code: int, num_tokens: int) -> int:
    """The path serving `num_tokens` tokens of type `code` (a quant_type code, run codes included)."""
    forced = getattr(_forced, "path", None)
    if forced is not None:
        if not serves(forced, code):
            raise ValueError(f"forced path {PATH_NAMES[forced]} cannot run quant type code {code}")
        return forced
    if code == qt.F32:
        return F32_BLAS
    if uses_int8_dot(code, num_tokens):
        if code >= qt.R_Q5_0:
            return RUN
        return AMX if AMX_IS_AVAILABLE and code == qt.Q8_0 else INT8
    if 2 <= num_tokens <= MAX_BATCH_TOKENS and code in BATCH_CODES:
        return BATCH
    if num_tokens <= max_fused_tokens(code):
        return FUSED
    return TILED


@contextlib.contextmanager
def forced_path(name: str):
    """Every linear on this thread takes path `name` (tests: each path against the numpy reference)."""
    previous = getattr(_forced, "path", None)
    _forced.path = PATH_NAMES.index(name)
    try:
        yield
    finally:
        _forced.path = previous


_LEAVES = {RUN: run_rows_kernels, INT8: groups_kernel, BATCH: batch_kernel, FUSED: fused_kernel,
           TILED: tiled_kernel}
_NO_HANDLES = handles_array([NO_KERNEL] * 4)


@functools.lru_cache(maxsize=None)
def leaf_handles(path: int, code: int) -> np.ndarray:
    """int64 [4, 2]: the leaf handles of (path, code), compiled (or loaded from numba's cache) on first use."""
    if path not in _LEAVES:
        return _NO_HANDLES
    handles = _LEAVES[path](code)
    return handles_array([tuple(row) for row in handles] + [NO_KERNEL] * (4 - len(handles)))


def linear_kernel(code: int, num_tokens: int) -> tuple[int, int, np.ndarray]:
    """The LinearKernel (path, code, leaf handles) serving num_tokens tokens of type `code` in njit glue
    (linear_into, the fused decode layer): there is no BLAS there, so the fused dot takes tiled's and f32_blas's
    calls (it serves any token count)."""
    path = linear_path(code, num_tokens)
    return path, code, leaf_handles(path, code)


def linear_path(code: int, num_tokens: int) -> int:
    """The path of linear_kernel(code, num_tokens), without its leaves' handles (nothing compiles)."""
    path = choose_path(code, num_tokens)
    return FUSED if path == TILED or path == F32_BLAS else path


@njit(cache=True, nogil=True)
def linear_into(kernel, data, x, out):
    """out = x @ data.T by kernel = (path, code, leaf handles) of linear_kernel, for every path but tiled and
    f32_blas (x: float32 [n, k] C-contiguous, out: float32 [n, rows]). The 8-bit paths' glue compiles only on tiers
    with the 8-bit dots (a constant condition: numba drops the branch elsewhere)."""
    path, code, handles = kernel
    if path == BATCH:
        batch_matvec_into(handles, data, x, out, np.int64(PARALLEL_MIN_WORK))
    elif path == FUSED:
        matvec_into(handles, code, data, x, out)
    elif USE_INT8_DOT and path == RUN:
        run_matvec_into(handles, code, data, x, out)
    elif USE_INT8_DOT and path == INT8:
        int8_matvec_into(handles, code, data, x, out)
    elif USE_INT8_DOT and path == AMX:
        amx_linear_into(data, x, out)
    else:
        raise ValueError("linear_into: no glue for this path here (tiled and f32_blas run from Python)")


if AMX_IS_AVAILABLE:
    @njit(cache=True)
    def amx_linear_into(data, x, out):
        quants, scales, _, _ = quantize_activations(x)
        amx_matvec_into(data, quants, scales, out)
else:  # nothing to compile: choose_path never picks AMX here
    @njit(cache=True)
    def amx_linear_into(data, x, out):
        raise RuntimeError("AMX tiles are not available on this CPU")


@njit(cache=True, inline="always")
def shared_input_linear_into(kernels, mats, first, x, outs, mixed_paths):
    """outs[i] = x @ mats[first + i].T by kernels[first + i] (linear_into's results bit for bit), with x quantized
    to 8 bits once and regrouped once per run code in a row (q/k/v and gate/up read one input). Inlined: the
    callers' outs (q/k/v, gate/up) go on padded to MAX_SHARED_MATS with their count, so the decode layer compiles
    one _shared_input_into (or _shared_run_into) for both (a compile of ~2.5 s less on a first run); outs past
    MAX_SHARED_MATS (a tuple of one array type) take a layer_linear_into each. mixed_paths: as layer_linear_into's
    (None: every kernels[first + i] takes the run path, and only its glue compiles)."""
    padded, count = padded_to_shared(outs, outs[0]), np.int64(min(len(outs), MAX_SHARED_MATS))
    if mixed_paths is None:
        _shared_run_into(kernels, mats, np.int64(first), x, padded, count)
    else:
        _shared_input_into(kernels, mats, np.int64(first), x, padded, count)
    for i in range(MAX_SHARED_MATS, len(outs)):
        layer_linear_into(kernels[first + i], mats[first + i], x, outs[i], mixed_paths)


@njit(cache=True, inline="always")
def layer_linear_into(kernel, data, x, out, mixed_paths):
    """linear_into for the decode layer. mixed_paths None: the caller knows every kernel of the layer takes the run
    path, and calls linear_into's run branch alone; numba drops a branch on `is None` of an argument typed None, so
    linear_into's other paths (batch, fused, int8, amx: ~5 s of a first run's decode layer compile, AVX2 Zen 3) do
    not compile. True: linear_into itself."""
    if mixed_paths is None:
        _, code, handles = kernel
        run_matvec_into(handles, code, data, x, out)
    else:
        linear_into(kernel, data, x, out)


@njit(cache=True)
def _shared_input_into(kernels, mats, first, x, outs, count):
    """shared_input_linear_into of outs[:count]."""
    if USE_INT8_DOT:
        _shared_quantized_input_into(kernels, mats, first, x, outs, count)
    else:  # float kernels only: nothing to share
        for i in range(count):
            linear_into(kernels[first + i], mats[first + i], x, outs[i])


@njit(cache=True)
def gated_linear_into(kernels, mats, first, x, gate_out, up_out, activation, mixed_paths):
    """gate_out = activation(x @ mats[first].T) * (x @ mats[first + 1].T) (activation.apply_range's kinds), up_out
    the second product: the feed-forward's gate and up of the decode layer. Where both take the run path with one
    code and shape, one region multiplies both and applies the activation on each thread's rows
    (run_matvec.run_gated_matvecs_into); else shared_input_linear_into, then the activation. The same bits either
    way. mixed_paths: layer_linear_into's."""
    gate_path, gate_code, gate_handles = kernels[first]
    up_path, up_code = kernels[first + 1][0], kernels[first + 1][1]
    gate, up = mats[first], mats[first + 1]
    if (USE_INT8_DOT and gate_path == RUN and up_path == RUN and gate_code == up_code
            and gate.shape[0] == up.shape[0] and gate.shape[1] == up.shape[1]):
        run_gated_matvecs_into(gate_handles, gate_code, gate, up, x, gate_out, up_out, activation)
        return
    shared_input_linear_into(kernels, mats, first, x, (gate_out, up_out), mixed_paths)
    flat_gate = gate_out.reshape(gate_out.size)  # in place: apply_range stays vectorised
    apply_range(activation, flat_gate, up_out.reshape(up_out.size), np.float32(0.0), flat_gate, np.int64(0),
                gate_out.size)


@njit(cache=True)
def _shared_quantized_input_into(kernels, mats, first, x, outs, count):
    has_int8, is_all_run = False, True
    for i in range(count):
        path = kernels[first + i][0]
        has_int8 = has_int8 or path == INT8
        is_all_run = is_all_run and path == RUN
    if is_all_run:  # one parallel region for all of them
        _shared_run_into(kernels, mats, first, x, outs, count)
        return
    # the GGUF-order 8-bit dots' input (the run dots quantize their own below, AMX and the float paths in
    # linear_into): none where no matrix takes them
    quantized = quantize_activations(x if has_int8 else x[:0])
    regrouped_code = -1  # the run code `regrouped` holds; none yet (its first value only gives it a type)
    regrouped = quantized_run_activations(qt.R_Q5_0, x[:0])  # (the same 8-bit values as quants and scales:
    for i in range(count):  # the engine compiles no run_activations of its own for this mixed path)
        path, code, handles = kernels[first + i]
        data = mats[first + i]
        if path == RUN:
            if code != regrouped_code:
                regrouped, regrouped_code = quantized_run_activations(code, x), code
            run_matvec_regrouped_into(handles, code, data, regrouped, outs[i])
        elif path == INT8:
            int8_matvec_quantized_into(handles, code, data, quantized, outs[i])
        else:
            linear_into(kernels[first + i], data, x, outs[i])


@njit(cache=True)
def _shared_run_into(kernels, mats, first, x, outs, count):
    """The run path's mat-vecs of one input into outs[:count]: x quantized and regrouped once per run code
    (quantized_run_activations: the same 8-bit values for each), then run_matvecs_regrouped_into."""
    code0, code1, code2 = kernels[first][1], kernels[first + min(1, count - 1)][1], kernels[first + count - 1][1]
    xr0 = quantized_run_activations(code0, x)
    xr1 = xr0 if code1 == code0 else quantized_run_activations(code1, x)
    xr2 = xr1 if code2 == code1 else (xr0 if code2 == code0 else quantized_run_activations(code2, x))
    run_matvecs_regrouped_into(kernels, mats, first, (xr0, xr1, xr2), outs, count)


@dataclass(frozen=True, order=True)
class LeafJob:
    """One leaf kernel to compile ahead of a run (pocket warmup: one process each, in parallel)."""
    path: int  # one of the paths with leaves, DECODE_ROWS (the embedding's row decode) or REPACK_ROWS
    code: int


DECODE_ROWS = -1  # LeafJob.path of dequant.decode_rows_kernel (embedding lookups)
REPACK_ROWS = -2  # LeafJob.path of run_layout.compile_repack (a GGUF type's rows into the run layout)
_JOB_TOKEN_COUNTS = (1, 2, MAX_FUSED_TOKENS, MAX_FUSED_TOKENS + 1, MAX_BATCH_TOKENS, MAX_BATCH_TOKENS + 1,
                     MAX_INT8_TOKENS, MAX_INT8_TOKENS + 1, MAX_RUN_TOKENS, MAX_RUN_TOKENS + 1)


def kernel_code(w: WeightTensor) -> int:
    """The code cpu_operands(w) gives (its run code where it gets the run layout), without repacking w."""
    code = qt.type_code_of(w)
    return run_layout.RUN_CODES[code] if USE_RUN_LAYOUT and run_layout.has_run_layout(w) else code


def leaf_jobs(weights, max_num_tokens: int) -> list[LeafJob]:
    """The leaf kernels that mat-vecs of `weights` over 1..max_num_tokens tokens (and embedding lookups of the
    token embedding, named *embd* or *embed*, and the repacking of Q8_0 rows into the run layout) compile on first
    use, each once."""
    jobs = set()
    for w in weights:
        if w.fp8 is not None or w.ggml_type not in qt.TYPE_CODES:
            continue
        code = kernel_code(w)
        if "embd" in w.name or "embed" in w.name:
            jobs.add(LeafJob(DECODE_ROWS, qt.type_code_of(w)))
        if code == qt.R_Q8_0:  # repacked at load by a compiled gather (the other types: numpy)
            jobs.add(LeafJob(REPACK_ROWS, qt.Q8_0))
        for num_tokens in sorted({min(n, max_num_tokens) for n in _JOB_TOKEN_COUNTS} | {max_num_tokens}):
            path = F32_BLAS if code == qt.F32 else choose_path(code, num_tokens)
            if path in _LEAVES:
                jobs.add(LeafJob(path, code))
    return sorted(jobs)


def compile_leaf(job: LeafJob) -> None:
    """Compile job's leaf into numba's cache (or load it from there) without running it."""
    if job.path == DECODE_ROWS:
        decode_rows_kernel(job.code)
    elif job.path == REPACK_ROWS:
        run_layout.compile_repack(job.code)
    else:
        _LEAVES[job.path](job.code)


def cpu_operands(w: WeightTensor) -> tuple[int, np.ndarray]:
    """(code, read-only uint8 rows) the CPU kernels read for w: its run layout (run_layout.py) where the 8-bit
    dots run and the type has one, else its GGUF bytes and type code."""
    runs = run_layout.run_weights(w) if USE_RUN_LAYOUT else None
    if runs is not None:
        return runs.code, runs.data
    return qt.type_code_of(w), readonly_bytes(w)


def _check_shapes(x: np.ndarray, w: WeightTensor, num_rows: int, out: np.ndarray | None) -> None:
    if x.ndim != 2 or x.shape[1] != w.shape[-1]:
        raise ValueError(f"linear {w.name!r}: x has shape {x.shape}, expected [n, {w.shape[-1]}]")
    expected = (x.shape[0], num_rows)
    if out is not None and (out.shape != expected or out.dtype != np.float32 or not out.flags.c_contiguous):
        raise ValueError(f"linear {w.name!r}: out must be C-contiguous float32 {expected}")


def tiled_into(code: int, data: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Tile decode + BLAS on every thread (tile_gemm), on one thread without a usable sgemm."""
    num_rows, row_length = data.shape[0], x.shape[1]
    tile_rows = int(min(num_rows, max(16, TILE_BYTES // (4 * row_length))))
    sgemm = find_sgemm()
    if sgemm is not None and use_threads(x.shape[0] * num_rows * row_length):
        tiled_matmul_into(leaf_handles(TILED, code), data, x, out, tile_rows, sgemm.address,
                          bool(sgemm.ilp64), numba.get_num_threads())
        return
    untiled_matmul_into(code, data, x, out, tile_rows)


def linear(x: np.ndarray, w: WeightTensor, out: np.ndarray | None = None) -> np.ndarray:
    """x: float32 [n, k], w: (m, k) -> float32 [n, m] = x @ W.T."""
    if w.fp8 is not None:  # FP8 E4M3 hook (HF checkpoints): kernels live in kernels_numba/cpu/matvec/fp8.py
        from kernels_numba.cpu.matvec.fp8 import fp8_linear
        return fp8_linear(x, w, out)
    code, data = cpu_operands(w)  # data: [m, bytes_per_row]; its shape is cheaper to read than w.num_rows
    x = np.ascontiguousarray(x, dtype=np.float32)
    _check_shapes(x, w, data.shape[0], out)
    if out is None:
        out = np.empty((x.shape[0], data.shape[0]), dtype=np.float32)
    linear_rows_into(code, data, x, out)
    return out


def linear_rows_into(code: int, data: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out = x @ W.T for W's kernel operands (cpu_operands: code, read-only uint8 rows), x and out float32
    C-contiguous [n, k] and [n, rows]; the path choose_path (or forced_path) picks."""
    path = F32_BLAS if code == qt.F32 else choose_path(code, x.shape[0])
    if path == F32_BLAS:
        np.matmul(x, data.view(np.float32).T, out=out)
    elif path == TILED:  # on the 8-bit grid of the dots where this type has them: prefill and decode agree
        tiled_into(code, data, round_activations(x) if rounds_activations(code) else x, out)
    elif path == RUN:  # linear_into's run branch, without compiling its other paths' glue (seconds of a first run)
        run_matvec_into(leaf_handles(path, code), code, data, x, out)
    else:
        linear_into((path, code, leaf_handles(path, code)), data, x, out)
