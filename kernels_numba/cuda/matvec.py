"""linear on the device: fused dequant + mat-vec, the weight never expanded in memory.

Each warp owns ROWS_PER_WARP rows at a time. Its lanes walk the columns together (lane l reads values l, l + 32,
...: neighbouring bytes of each block, coalesced), decode the value of every row of the group in registers
(independent loads in flight) and multiply each with up to TOKENS_PER_PASS token rows of x (one weight read
serves them all). The 8 rows x 4 tokens of lane partials then meet in shared memory and lane p adds up pair p
(a transposed reduction: one warp barrier per group instead of five shuffle rounds per row and token). Warps
stride over the row groups and the grid's second axis over token chunks, so a decode step's mat-vec runs every
group at once. (An H200 measured the former layout, 32 rows one after another per warp, at 68.8 GB/s on Gemma
3's 262144-row head and ~0.65 ms per layer projection: latency-bound, 10-32 blocks for a 132-SM GPU.) Prefill
re-reads a row once per token chunk (from L2); a tensor-core GEMM path is not written yet.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, blocks_for, empty
from kernels_numba.cuda.device_weight import upload_weight
from kernels_numba.cuda.launch_shape import MATVEC_WARPS, MAX_GRID_Y, MAX_ROW_BLOCKS
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.value_decode import decode_value
from kernels_numba.cuda.warp_reduce import WARP_SIZE

ROWS_PER_WARP = 8
TOKENS_PER_PASS = 4  # ROWS_PER_WARP x TOKENS_PER_PASS = WARP_SIZE pairs: lane p reduces one
PADDED_TILE = WARP_SIZE + 1  # one spare column: lanes reading a row of partials hit different banks


@cuda.jit(device=True)
def group_partials(data, first_row, num_rows, code, scales, block_rows, block_cols, x, first_token, count, sums):
    """This lane's partial sums of W[first_row + i, :] . x[first_token + t, :] into sums[t, i]."""
    weights = cuda.local.array(ROWS_PER_WARP, np.float32)
    for t in range(TOKENS_PER_PASS):
        for i in range(ROWS_PER_WARP):
            sums[t, i] = np.float32(0.0)
    for j in range(cuda.threadIdx.x % WARP_SIZE, x.shape[1], WARP_SIZE):
        for i in range(ROWS_PER_WARP):  # the group's decodes: independent loads in flight
            weights[i] = (decode_value(data, first_row + i, j, code, scales, block_rows, block_cols)
                          if first_row + i < num_rows else np.float32(0.0))
        for t in range(TOKENS_PER_PASS):  # a small nest with fixed trip counts: unrolled, sums in registers
            if t < count:
                value = x[first_token + t, j]
                for i in range(ROWS_PER_WARP):
                    sums[t, i] += weights[i] * value


@cuda.jit(device=True)
def store_group(sums, tile, out, first_row, first_token, count):
    """out[first_token + t, first_row + i] = the warp's total of sums[t, i]: partials through the warp's tile."""
    warp, lane = cuda.threadIdx.x // WARP_SIZE, cuda.threadIdx.x % WARP_SIZE
    for t in range(TOKENS_PER_PASS):
        for i in range(ROWS_PER_WARP):
            tile[warp, t * ROWS_PER_WARP + i, lane] = sums[t, i]
    cuda.syncwarp()
    t, r = lane // ROWS_PER_WARP, first_row + lane % ROWS_PER_WARP
    if t < count and r < out.shape[1]:
        total = np.float32(0.0)
        for k in range(WARP_SIZE):
            total += tile[warp, lane, k]
        out[first_token + t, r] = total
    cuda.syncwarp()  # the tile is rewritten by the warp's next group


@cuda.jit
def matvec_kernel(data, code, scales, block_rows, block_cols, x, out):
    """out[t, r] = sum_j W[r, j] * x[t, j]: warp w of block (b, c) owns row groups b * MATVEC_WARPS + w + k * (the
    grid's warps) and token chunks c + k * gridDim.y."""
    sums = cuda.local.array((TOKENS_PER_PASS, ROWS_PER_WARP), np.float32)
    tile = cuda.shared.array((MATVEC_WARPS, WARP_SIZE, PADDED_TILE), np.float32)
    num_rows, num_tokens = out.shape[1], x.shape[0]
    first_group = cuda.blockIdx.x * MATVEC_WARPS + cuda.threadIdx.x // WARP_SIZE
    for first_token in range(cuda.blockIdx.y * TOKENS_PER_PASS, num_tokens, cuda.gridDim.y * TOKENS_PER_PASS):
        count = min(TOKENS_PER_PASS, num_tokens - first_token)
        for group in range(first_group, num_groups(num_rows), cuda.gridDim.x * MATVEC_WARPS):
            first_row = group * ROWS_PER_WARP
            group_partials(data, first_row, num_rows, code, scales, block_rows, block_cols, x, first_token, count,
                           sums)
            store_group(sums, tile, out, first_row, first_token, count)


@cuda.jit(device=True)
def num_groups(num_rows):
    """Row groups of ROWS_PER_WARP rows covering num_rows."""
    return (num_rows + ROWS_PER_WARP - 1) // ROWS_PER_WARP


def matvec_grid(num_rows: int, num_tokens: int) -> tuple[int, int]:
    """(blocks of MATVEC_WARPS row groups, token chunks) for a mat-vec launch."""
    return (min(MAX_ROW_BLOCKS, blocks_for(blocks_for(num_rows, ROWS_PER_WARP), MATVEC_WARPS)),
            min(MAX_GRID_Y, blocks_for(num_tokens, TOKENS_PER_PASS)))


def linear(x, w, out=None):
    """y = x @ W.T with x: [n, k] -> float32 device array [n, m]."""
    dw = upload_weight(w)
    x = as_device(x)
    if x.ndim != 2 or x.shape[1] != dw.row_length:
        raise ValueError(f"linear {dw.name!r}: x has shape {tuple(x.shape)}, expected [n, {dw.row_length}]")
    out = empty((x.shape[0], dw.num_rows), np.float32, out)
    if x.shape[0]:
        matvec_kernel[matvec_grid(dw.num_rows, x.shape[0]), MATVEC_WARPS * WARP_SIZE, current_stream()](
            dw.data, dw.code, dw.scales, dw.block_rows, dw.block_cols, x, out)
    return out
