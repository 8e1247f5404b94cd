"""linear on the device: fused dequant + mat-vec, the weight never expanded in memory.

Each warp owns a tile of 32 output rows. For each row in turn its lanes read consecutive values (neighbouring
bytes of each block: coalesced), decode them in registers and multiply with up to TOKENS_PER_PASS token rows
of x (one weight read serves them all). The 32 lane partials of every row go to shared memory, and after one
barrier lane i adds up row i's partials (a transposed reduction: one barrier per 32 rows instead of five
shuffle rounds per row). Prefill loops over token chunks; a tensor-core GEMM path is not written yet.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, blocks_for, empty
from kernels_numba.cuda.device_weight import upload_weight
from kernels_numba.cuda.launch_shape import MATVEC_WARPS
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.value_decode import decode_value
from kernels_numba.cuda.warp_reduce import WARP_SIZE

TOKENS_PER_PASS = 4
ROWS_PER_BLOCK = MATVEC_WARPS * WARP_SIZE
PADDED_TILE = WARP_SIZE + 1  # one spare column: lanes reading a row of partials hit different banks


@cuda.jit
def matvec_kernel(data, code, scales, block_rows, block_cols, x, out):
    """out[t, r] = sum_j W[r, j] * x[t, j]; rows first..first+31 of a block's warp w are its tile."""
    warp, lane = cuda.threadIdx.x // WARP_SIZE, cuda.threadIdx.x % WARP_SIZE
    partials = cuda.shared.array((MATVEC_WARPS, TOKENS_PER_PASS, WARP_SIZE, PADDED_TILE), np.float32)
    sums = cuda.local.array(TOKENS_PER_PASS, np.float32)
    first_row = cuda.blockIdx.x * ROWS_PER_BLOCK + warp * WARP_SIZE
    num_rows, num_tokens, row_length = out.shape[1], x.shape[0], x.shape[1]
    for first_token in range(0, num_tokens, TOKENS_PER_PASS):
        count = min(TOKENS_PER_PASS, num_tokens - first_token)
        for i in range(WARP_SIZE):
            r = first_row + i
            for t in range(TOKENS_PER_PASS):
                sums[t] = np.float32(0.0)
            if r < num_rows:
                for j in range(lane, row_length, WARP_SIZE):
                    w = decode_value(data, r, j, code, scales, block_rows, block_cols)
                    for t in range(count):
                        sums[t] += w * x[first_token + t, j]
            for t in range(TOKENS_PER_PASS):
                partials[warp, t, i, lane] = sums[t]
        cuda.syncthreads()
        r = first_row + lane
        if r < num_rows:
            for t in range(count):
                total = np.float32(0.0)
                for k in range(WARP_SIZE):
                    total += partials[warp, t, lane, k]
                out[first_token + t, r] = total
        cuda.syncthreads()  # the tile is rewritten by the next token chunk


def linear(x, w, out=None):
    """y = x @ W.T with x: [n, k] -> float32 device array [n, m]."""
    dw = upload_weight(w)
    x = as_device(x)
    if x.ndim != 2 or x.shape[1] != dw.row_length:
        raise ValueError(f"linear {dw.name!r}: x has shape {tuple(x.shape)}, expected [n, {dw.row_length}]")
    out = empty((x.shape[0], dw.num_rows), np.float32, out)
    if x.shape[0]:
        matvec_kernel[blocks_for(dw.num_rows, ROWS_PER_BLOCK), ROWS_PER_BLOCK, current_stream()](
            dw.data, dw.code, dw.scales, dw.block_rows, dw.block_cols, x, out)
    return out
