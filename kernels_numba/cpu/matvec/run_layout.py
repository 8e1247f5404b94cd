"""Weights regrouped for the run dots (run_dot.py): a CPU-only copy of a quantized matrix in which each SIMD lane
owns one run (a block of 32 values, Q6_K: a sub-block of 16) and its integer sum.

In GGUF order a 32-value block's integer dot lands in 8 int32 lanes of vpdpbusd, so every lane pays its own
float epilogue (convert, scale, add): 8 float ops per block per token, more than the integer work. Here a row's
runs go in groups of G = 16 (the row's tail: 8, then 4, then 2) and a group's bytes are interleaved so that slice j of
the group (64 bytes for G = 16) holds values 4j..4j+3 of each of its G runs side by side: R/4 vpdpbusd add a
whole run into one lane, and one convert + FMA per group serves 16 runs.

A group of G runs, per type (the same bytes per run as GGUF, so the copy is as big as the original):
- Q5_0: G f16 scales | 4 slice pairs of 4G bytes (low nibbles: slice 2m, high: slice 2m + 1) | 8 x G/2 bytes,
  the fifth bits of slice j (bit i: byte i of the slice).
- Q4_0: G f16 scales | 4 slice pairs.
- Q4_1: G f16 scales | G f16 mins | 4 slice pairs (value d * q + m).
- Q4_K: G/8 super-block headers as GGUF has them (d, dmin, 12 bytes of 6-bit scales and mins) | 4 slice pairs.
- Q6_K (runs of 16, G = 16: one super-block): 16 int8 scales | d f16 | 2 slice pairs of 64 bytes | 64 bytes of
  high bit pairs (bits 2j, 2j + 1 of byte i: the top two bits of byte i of slice j).
- Q8_0: G f16 scales | 8 slices of 4G bytes, each quant + 128 (unsigned, as vpdpbusd reads weights); a group of
  4 or 2 runs (a row's tail) holds its slices in the order 0, 2, 4, 6, 1, 3, 5, 7, the 64-byte vectors the folded
  tail dots (run_dot) read as the even and the odd slices. Q8_0 has the layout on AMX CPUs too: there these dots
  beat amx_matvec on the GGUF rows (the LM heads, 2 threads, caches flushed between calls, Intel Xeon with AMX):
  Gemma 3's 262144 x 640 at 1 token 9.37 -> 6.08 ms, 4: 9.99 -> 8.42, 8: 10.75 -> 9.06, 16: 19.7 -> 16.2, 48:
  52.6 -> 45.1 (12: 14.9 -> 17.2); SmolLM2's 49152 x 576 alike (1 token 1.73 -> 1.25 ms).

`run_weights(w)` makes the copy once per weight tensor (kept on it, in huge pages where the OS has them:
weight_arena.py; and on disk where the CLI keeps a store: run_layout_store.py, so a warm start reads it instead of
regrouping). It reads a mapped GGUF tensor with file reads, so the mapping's pages never become resident: the CPU
kernels read only the copy, and resident memory does not grow (anything else that reads the mapping, a reference
op or a GPU upload, faults its pages in as before).
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np
from numba import njit, prange, types
from numba.extending import register_jitable

from gguf_loader.private_bytes import private_bytes
from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec import run_layout_store
from kernels_numba.cpu.matvec.weight_arena import empty_weights

GROUP_RUNS = 16  # runs of a full group: one 512-bit vector of int32 lanes
MIN_GROUP_RUNS = 2  # the narrowest tail group: rows of Q4_0/Q5_0/Q8_0 need k % 64 == 0 (SmolLM2's 576 too)
FOLDED_MAX_RUNS = 4  # tail groups of 4 or 2 runs lie folded: their 8 slices fill 2 (or 1) full vectors
SLICE_VALUES = 4  # values of a run in one slice: one vpdpbusd lane

# the run layout's codes (quant_type numbers them after the GGUF types): raw code -> run code
RUN_CODES = {qt.Q5_0: qt.R_Q5_0, qt.Q4_0: qt.R_Q4_0, qt.Q4_K: qt.R_Q4_K, qt.Q6_K: qt.R_Q6_K, qt.Q8_0: qt.R_Q8_0,
             qt.Q4_1: qt.R_Q4_1}
RUN_VALUES = {qt.R_Q5_0: 32, qt.R_Q4_0: 32, qt.R_Q4_K: 32, qt.R_Q6_K: 16, qt.R_Q8_0: 32, qt.R_Q4_1: 32}
ZERO_POINTS = {qt.R_Q5_0: 16, qt.R_Q4_0: 8, qt.R_Q4_K: 0, qt.R_Q6_K: 32, qt.R_Q8_0: 128, qt.R_Q4_1: 0}
# a group of FOLDED_MAX_RUNS or fewer runs lies folded (run_dot): at position p its slice FOLDED_SLICES[p], the
# even slices first (Q8_0's weights, every type's x; Q4_0/Q5_0 nibble pairs give that order on their own), and
# slice j at position FOLDED_POSITIONS[j]
FOLDED_SLICES = (0, 2, 4, 6, 1, 3, 5, 7)
FOLDED_POSITIONS = tuple(FOLDED_SLICES.index(j) for j in range(len(FOLDED_SLICES)))
REPACK_CHUNK_BYTES = 1 << 24  # rows repacked at a time: the temporaries stay small next to a big LM head


@register_jitable
def group_runs(runs_left):
    """Runs in the next group of a row with runs_left runs still to go (16, 8, 4 or 2)."""
    if runs_left >= 16:
        return 16
    if runs_left >= 8:
        return 8
    return 4 if runs_left >= 4 else 2


def groups_of(num_runs: int) -> list[tuple[int, int]]:
    """(first run, runs) of each group of a row of num_runs runs."""
    groups, first = [], 0
    while first < num_runs:
        width = group_runs(num_runs - first)
        groups.append((first, width))
        first += width
    return groups


def supports(code: int, row_length: int) -> bool:
    """Whether rows of this GGUF type and length have a run layout."""
    if code not in RUN_CODES:
        return False
    run_values = RUN_VALUES[RUN_CODES[code]]
    return row_length % (run_values * MIN_GROUP_RUNS) == 0 and (code != qt.Q6_K or row_length % 256 == 0)


def _slices(quants: np.ndarray, width: int) -> np.ndarray:
    """quants uint8 [rows, width runs, run values] -> [rows, run values / 4 slices, 4 * width bytes]."""
    rows, _, run_values = quants.shape
    by_slice = quants.reshape(rows, width, run_values // SLICE_VALUES, SLICE_VALUES).transpose(0, 2, 1, 3)
    return by_slice.reshape(rows, run_values // SLICE_VALUES, SLICE_VALUES * width)


def _nibble_pairs(slices: np.ndarray) -> np.ndarray:
    """Slices of 4-bit values -> [rows, slices / 2, bytes]: slice 2m in the low nibbles, 2m + 1 in the high."""
    return (slices[:, 0::2] & 0x0F) | ((slices[:, 1::2] & 0x0F) << 4)


def _block_nibbles(qs: np.ndarray) -> np.ndarray:
    """16 bytes of nibbles per block [rows, blocks, 16] -> quants [rows, blocks, 32]: values 0-15 the low nibbles,
    16-31 the high ones (ggml's Q4_0/Q5_0 order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _block_format(raw: np.ndarray, block_bytes: int, has_fifth_bit: bool, has_min: bool = False) -> np.ndarray:
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, block_bytes)
    scales = blocks[:, :, 0:4 if has_min else 2]
    quants = _block_nibbles(blocks[:, :, block_bytes - 16:])
    if has_fifth_bit:
        high = blocks[:, :, 2:6].copy().view("<u4")  # [rows, blocks, 1]
        bits = (high >> np.arange(32, dtype=np.uint32)) & 1
        quants = quants | (bits.astype(np.uint8) << 4)
    parts = []
    for first, width in groups_of(blocks.shape[1]):
        group = slice(first, first + width)
        slices = _slices(quants[:, group], width)
        header = scales[:, group]
        if has_min:  # the group's d values, then its m values
            header = np.concatenate([header[:, :, 0:2], header[:, :, 2:4]], axis=1)
        parts += [header.reshape(rows, -1), _nibble_pairs(slices).reshape(rows, -1)]
        if has_fifth_bit:
            fifth = np.packbits((slices >> 4) & 1, axis=-1, bitorder="little")
            parts.append(fifth.reshape(rows, -1))
    return np.concatenate(parts, axis=1)


def _q4_k(raw: np.ndarray) -> np.ndarray:
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 144)
    qs = blocks[:, :, 16:].reshape(rows, -1, 4, 32)  # chunk c: runs 2c (low nibbles) and 2c + 1 (high)
    quants = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(rows, -1, 32)  # [rows, runs, 32]
    parts = []
    for first, width in groups_of(quants.shape[1]):
        headers = blocks[:, first // 8:(first + width) // 8, :16]
        parts += [headers.reshape(rows, -1), _nibble_pairs(_slices(quants[:, first:first + width], width))
                  .reshape(rows, -1)]
    return np.concatenate(parts, axis=1)


def q6_k_quants(blocks: np.ndarray) -> np.ndarray:
    """Q6_K super-blocks uint8 [rows, n, 210] -> the 6-bit quants [rows, n, 256] in value order (ggml's
    dequantize_row_q6_K: value 128h + 32s + l of half h takes bits of ql[64h + l + 32(s & 1)] (low nibble for
    s < 2) and bits 2s, 2s + 1 of qh[32h + l])."""
    ql, qh = blocks[..., :128], blocks[..., 128:192]
    quants = np.empty(blocks.shape[:-1] + (256,), dtype=np.uint8)
    for half in range(2):
        low = ql[..., 64 * half:64 * half + 64]
        high = qh[..., 32 * half:32 * half + 32]
        for s in range(4):
            nibbles = low[..., 32 * (s & 1):32 * (s & 1) + 32]
            nibbles = nibbles & 0x0F if s < 2 else nibbles >> 4
            quants[..., 128 * half + 32 * s:128 * half + 32 * s + 32] = nibbles | (((high >> (2 * s)) & 3) << 4)
    return quants


def _q6_k(raw: np.ndarray) -> np.ndarray:
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 210)
    slices = _slices(q6_k_quants(blocks).reshape(rows * blocks.shape[1], 16, 16), 16)  # [.., 4 slices, 64]
    high_pairs = np.zeros(slices.shape[:1] + (64,), dtype=np.uint8)
    for j in range(4):
        high_pairs |= (slices[:, j] >> 4) << (2 * j)
    parts = [blocks[:, :, 192:208].reshape(-1, 16), blocks[:, :, 208:210].reshape(-1, 2),
             _nibble_pairs(slices).reshape(-1, 128), high_pairs]
    return np.concatenate(parts, axis=1).reshape(rows, -1)


@functools.lru_cache(maxsize=8)
def q8_0_sources(row_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """A Q8_0 row's run layout as a byte gather: (source offset in the GGUF row, XOR mask) of each byte (0x80
    turns an int8 quant q into q + 128)."""
    sources, masks = [], []
    for first, width in groups_of(row_bytes // 34):
        for lane in range(width):
            sources += [34 * (first + lane), 34 * (first + lane) + 1]
            masks += [0, 0]
        order = FOLDED_SLICES if width <= FOLDED_MAX_RUNS else range(8)
        for j in order:
            for lane in range(width):
                sources += [34 * (first + lane) + 2 + SLICE_VALUES * j + b for b in range(SLICE_VALUES)]
                masks += [0x80] * SLICE_VALUES
    sources, masks = np.array(sources, dtype=np.int64), np.array(masks, dtype=np.uint8)
    sources.flags.writeable = masks.flags.writeable = False
    return sources, masks


@njit(cache=True, nogil=True, parallel=True)
def _gather_rows_into(raw, sources, masks, out):
    for r in prange(raw.shape[0]):
        for i in range(sources.size):
            out[r, i] = raw[r, sources[i]] ^ masks[i]


# _gather_rows_into as repack calls it: a read-only chunk of GGUF rows, q8_0_sources' tables, the packed rows
GATHER_SIGNATURE = (types.Array(types.uint8, 2, "C", readonly=True), types.Array(types.int64, 1, "C", readonly=True),
                    types.Array(types.uint8, 1, "C", readonly=True), types.Array(types.uint8, 2, "C"))


def compile_repack(code: int) -> None:
    """Compile (or load from numba's cache) the kernel that repacks rows of GGUF type `code` into the run layout,
    without running it: Q8_0's byte gather (the other types repack with numpy). A tier whose kernels are compiled
    from another tier's recorded signatures (the build: the recording tier had kept Q8_0 in GGUF order where it had
    AMX, so it never repacked) gets it as a leaf job (dispatch.leaf_jobs)."""
    if code == qt.Q8_0:
        _gather_rows_into.compile(GATHER_SIGNATURE)


def _repack_rows_into(code: int, raw: np.ndarray, out: np.ndarray) -> None:
    if code == qt.Q8_0:
        rows = raw.view()
        rows.flags.writeable = False  # one signature whether the chunk came as a copy or as a read-only view
        _gather_rows_into(rows, *q8_0_sources(raw.shape[1]), out)
    elif code == qt.Q5_0:
        out[...] = _block_format(raw, 22, has_fifth_bit=True)
    elif code == qt.Q4_0:
        out[...] = _block_format(raw, 18, has_fifth_bit=False)
    elif code == qt.Q4_1:
        out[...] = _block_format(raw, 20, has_fifth_bit=False, has_min=True)
    elif code == qt.Q4_K:
        out[...] = _q4_k(raw)
    else:
        out[...] = _q6_k(raw)


def repack(code: int, raw: np.ndarray, read_rows=np.ascontiguousarray, empty=None) -> np.ndarray:
    """GGUF rows uint8 [rows, bytes] of a type of RUN_CODES -> the same rows in the run layout (same size), in
    empty(shape) (np.empty by default), a chunk of rows at a time: read_rows(rows) gives a chunk's bytes
    (private_bytes: a mapped tensor's by file reads, so neither the mapping nor a whole copy of the tensor becomes
    resident)."""
    if code not in RUN_CODES:
        raise ValueError(f"no run layout for type code {code}")
    packed = np.empty(raw.shape, dtype=np.uint8) if empty is None else empty(raw.shape)
    chunk_rows = max(1, REPACK_CHUNK_BYTES // max(1, raw.shape[1]))
    for start in range(0, raw.shape[0], chunk_rows):
        rows = np.ascontiguousarray(read_rows(raw[start:start + chunk_rows]), dtype=np.uint8)
        _repack_rows_into(code, rows, packed[start:start + rows.shape[0]])
    return packed


@dataclass(frozen=True)
class RunWeights:
    """A weight matrix in the run layout: code (a run code of quant_type), data uint8 [rows, bytes_per_row]."""
    code: int
    data: np.ndarray


def _malloc_trim():
    """glibc's malloc_trim(0) where there is one, else None."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def has_run_layout(w: WeightTensor) -> bool:
    """Whether w's type and shape have a run layout (run_weights makes it; RUN_CODES gives its code)."""
    code = qt.TYPE_CODES.get(w.ggml_type)
    return w.fp8 is None and len(w.shape) == 2 and code is not None and supports(code, w.shape[-1])


def run_weights(w: WeightTensor) -> RunWeights | None:
    """w in the run layout (made once and kept on w), or None when its type or shape has none."""
    cached = w.cpu_layouts.get("runs", False)
    if cached is not False:
        return cached
    code = qt.TYPE_CODES.get(w.ggml_type)
    result = None
    if has_run_layout(w):
        raw = np.asarray(w.data)
        key = run_layout_store.layout_key(raw, RUN_CODES[code])
        packed = run_layout_store.load_layout(key, raw.shape, empty_weights)  # kept by an earlier run
        if packed is None:
            packed = repack(code, raw, read_rows=private_bytes, empty=empty_weights)
            run_layout_store.save_layout(key, packed)
            if _MALLOC_TRIM is not None:  # the repack's temporaries leave holes below the copy; give them back
                _MALLOC_TRIM(0)
        packed.flags.writeable = False
        result = RunWeights(RUN_CODES[code], packed)
    w.cpu_layouts["runs"] = result
    return result
