"""Fused mat-vec for 2-12 tokens (batched decode, speculative verify): each weight is decoded once for all tokens.

The one-token kernels (block_dot) turn every weight into float32 for a single FMA; run per token, decode and
weight reads grow with the batch (LM head, 8 tokens, one thread: 84-107 ms vs 35 for one token). A row group
decodes one 32-value block into a small float32 stack array (pair_decode), and a register tile (tile_fma)
multiplies it with that block of every token: 4 rows x 4 tokens, or 2 rows x 8 tokens, 16 zmm accumulators
either way. A batch of n tokens runs ceil(n / 8) 2x8 tiles plus one 4x4 tile for a remainder of up to 4
tokens; tiles past the last token repeat it and discard the result (cheaper than narrower tile shapes, which
would each be compiled per type). The float32 math is exact: only the summation order differs from the
one-token kernels. Row groups split across threads as in matmul. Measured (LM head, one thread, loaded
machine, CPU time): 4 tokens 36 ms (was 51-62), 8 tokens 55 (was 84-107), 12 tokens 104 (was 124-159).
"""
import functools

import numpy as np
from numba import literally, njit, prange, types

from kernels_numba.cpu.ir.native_call import handle_at, handles_array, native_kernel
from kernels_numba.cpu.jit_options import SUM_FASTMATH
from kernels_numba.cpu.matvec.leaf_types import OUT_TYPE, WEIGHTS_TYPE
from kernels_numba.cpu.ir.lanes import lane_sum, zeroed_lanes
from kernels_numba.cpu.matvec.pair_decode import PAIR_CODES, block_params, pair_values
from kernels_numba.cpu.parallel_policy import call_native_in_chunks, chunk_span, pool_chunks
from kernels_numba.cpu.ir.prefetch import prefetch_rows
from kernels_numba.cpu.matvec.quant_type import Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0
from kernels_numba.cpu.ir.tile_fma import fma_block_tile

BATCH_CODES = frozenset(PAIR_CODES)
ROWS_PER_GROUP = 4
PREFETCH_ROWS_AHEAD = 4  # the next row group streams in while this one is computed (as in matmul)


@njit(cache=True, inline="always")
def _decode_blocks4(code, data, rows, blocks, w):
    """w[32 i + v] = value v of block blocks[i] of row rows[i] (i < 4), in one loop over the 16 value pairs.

    Inlined (as _store_tile): a call would spill the tile's accumulators to the stack. Always four row blocks:
    with two, LLVM fully unrolls the small Q8_0 loop before its vectoriser sees it (scalar decode: the LM head's
    2x8 tiles ran 4x slower), and a run-time trip count instead slowed the four-row loop by 1.6x."""
    ra, rb, rc, rd = rows
    pa, pb = block_params(code, data, ra, blocks[0]), block_params(code, data, rb, blocks[1])
    pc, pd = block_params(code, data, rc, blocks[2]), block_params(code, data, rd, blocks[3])
    for j in range(16):
        w[j], w[16 + j] = pair_values(code, data, ra, pa, j)
        w[32 + j], w[48 + j] = pair_values(code, data, rb, pb, j)
        w[64 + j], w[80 + j] = pair_values(code, data, rc, pc, j)
        w[96 + j], w[112 + j] = pair_values(code, data, rd, pd, j)


@njit(cache=True, inline="always")
def _store_tile(acc, rows_in_tile, num_tokens, t0, out, first_row, num_rows):
    """out[t0 + t, first_row + r] = sum of accumulator (t, r), for the real tokens and rows of the tile."""
    for t in range(num_tokens):
        for r in range(num_rows):
            out[t0 + t, first_row + r] = lane_sum(acc, 16 * (t * rows_in_tile + r), 16)


@njit(cache=True, fastmath=SUM_FASTMATH)
def tile_4x4_into(code, data, rows, x, t0, out, first_row, num_rows):
    """Rows `rows` (4, may repeat) times tokens t0..t0+3 (clamped to the last token) into out."""
    literally(code)
    last = x.shape[0] - 1
    tokens = (t0, min(t0 + 1, last), min(t0 + 2, last), min(t0 + 3, last))
    acc = zeroed_lanes(256)  # [token][row][16 lanes]
    w = zeroed_lanes(128)  # [row][32 values]: one decoded block
    for blk in range(x.shape[1] // 32):
        _decode_blocks4(code, data, rows, (blk, blk, blk, blk), w)
        fma_block_tile(acc, w, x, tokens, 32 * blk, 4)
    _store_tile(acc, 4, min(4, x.shape[0] - t0), t0, out, first_row, num_rows)


@njit(cache=True, fastmath=SUM_FASTMATH)
def tile_2x8_into(code, data, ra, rb, x, t0, out, first_row, num_rows):
    """Rows ra, rb times tokens t0..t0+7 (clamped to the last token) into out; decodes two blocks at a time."""
    literally(code)
    last = x.shape[0] - 1
    tokens = (t0, min(t0 + 1, last), min(t0 + 2, last), min(t0 + 3, last), min(t0 + 4, last),
              min(t0 + 5, last), min(t0 + 6, last), min(t0 + 7, last))
    acc = zeroed_lanes(256)  # [token][row][16 lanes]
    w = zeroed_lanes(128)  # [block][row][32 values]: two decoded blocks
    num_blocks = x.shape[1] // 32
    for blk in range(0, num_blocks - 1, 2):
        _decode_blocks4(code, data, (ra, rb, ra, rb), (blk, blk, blk + 1, blk + 1), w)
        fma_block_tile(acc, w[:64], x, tokens, 32 * blk, 2)
        fma_block_tile(acc, w[64:], x, tokens, 32 * blk + 32, 2)
    if num_blocks % 2:
        blk = num_blocks - 1
        _decode_blocks4(code, data, (ra, rb, ra, rb), (blk, blk, blk, blk), w)
        fma_block_tile(acc, w[:64], x, tokens, 32 * blk, 2)
    _store_tile(acc, 2, min(8, x.shape[0] - t0), t0, out, first_row, num_rows)


@njit(cache=True, fastmath=SUM_FASTMATH)
def group_into(code, data, first_row, x, out):
    """out[:, first_row .. first_row+3] for all tokens (a short final group repeats its last row)."""
    literally(code)
    last_row = min(first_row + ROWS_PER_GROUP, data.shape[0]) - 1
    rows = (first_row, min(first_row + 1, last_row), min(first_row + 2, last_row), min(first_row + 3, last_row))
    num_rows = last_row + 1 - first_row
    t0 = 0
    while x.shape[0] - t0 > 4:
        tile_2x8_into(code, data, rows[0], rows[1], x, t0, out, first_row, min(2, num_rows))
        if num_rows > 2:
            tile_2x8_into(code, data, rows[2], rows[3], x, t0, out, first_row + 2, num_rows - 2)
        t0 += 8
    if t0 < x.shape[0]:
        tile_4x4_into(code, data, rows, x, t0, out, first_row, num_rows)


@njit(cache=True, fastmath=SUM_FASTMATH)
def groups_of_type_into(code, data, x, out, first_group, stop_group):
    literally(code)
    for group in range(first_group, stop_group):
        first_row = ROWS_PER_GROUP * group
        prefetch_rows(data, first_row + PREFETCH_ROWS_AHEAD, first_row + PREFETCH_ROWS_AHEAD + ROWS_PER_GROUP)
        group_into(code, data, first_row, x, out)


@njit(cache=True, fastmath=SUM_FASTMATH, inline="always")
def groups_into(code, data, x, out, first_group, stop_group):
    """Row groups first_group..stop_group-1; each branch passes a constant code, so it compiles one type only."""
    if code == Q8_0:
        groups_of_type_into(Q8_0, data, x, out, first_group, stop_group)
    elif code == Q5_0:
        groups_of_type_into(Q5_0, data, x, out, first_group, stop_group)
    elif code == Q4_K:
        groups_of_type_into(Q4_K, data, x, out, first_group, stop_group)
    elif code == Q6_K:
        groups_of_type_into(Q6_K, data, x, out, first_group, stop_group)
    elif code == Q5_K:
        groups_of_type_into(Q5_K, data, x, out, first_group, stop_group)
    elif code == Q5_1:
        groups_of_type_into(Q5_1, data, x, out, first_group, stop_group)
    elif code == Q4_0:
        groups_of_type_into(Q4_0, data, x, out, first_group, stop_group)
    elif code == Q4_1:
        groups_of_type_into(Q4_1, data, x, out, first_group, stop_group)


@functools.lru_cache(maxsize=None)
def batch_leaf(code: int):
    """The batch path's leaf for type `code`: groups_into over all row groups, split into `chunks` contiguous chunks
    across threads. `code` is a constant of this closure, so numba keeps only its type's branch of groups_into."""
    @njit(cache=True, nogil=True, parallel=True)
    def batch_rows_into(data, x, out, chunks):
        num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
        for chunk in prange(chunks):
            first, stop = chunk_span(chunk, chunks, num_groups)
            groups_into(code, data, x, out, first, stop)
    return batch_rows_into


def batch_kernel(code: int) -> np.ndarray:
    """The leaf handle (ir/native_call.py) of type `code` (one of BATCH_CODES), as a [1, 2] handles array."""
    return handles_array([native_kernel(batch_leaf(code), (WEIGHTS_TYPE, OUT_TYPE, OUT_TYPE, types.int64))])


@njit(cache=True)
def batch_matvec_into(batch, data, x, out, min_parallel_work):
    """out = x @ data.T for x: float32 [n, k] C-contiguous (n <= dispatch.MAX_BATCH_TOKENS, k a multiple of 256 for
    K-quants) by batch = batch_kernel(code) of the rows' type (one of BATCH_CODES); threads once rows * k >=
    min_parallel_work (small matrices too run the parallel entry: parallel_policy.call_native_in_chunks)."""
    num_groups = (data.shape[0] + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP
    chunks = pool_chunks(num_groups, data.shape[0] * x.shape[1], min_parallel_work)
    call_native_in_chunks(handle_at(batch, 0), (data, x, out), chunks)
