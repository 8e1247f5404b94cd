"""out = x @ W.T with 8-bit activations on AMX tiles (amx_dot.py): Q8_0, the type of the big LM heads.

One thread, Gemma 3's 262144 x 640 Q8_0 LM head, AMX vs the VNNI dots (int8_matvec): 1 token 16.8 vs 15.7 ms,
4: 18.6 vs 21.7, 8: 19.2 vs 36.2, 16: 35.7 vs 68.5 (the 171 MB stream is the floor; VNNI's compute grows with
every token, AMX's hardly does until the tile is full).

Tokens go in passes of up to 16 (one B tile column each); row groups of 16 split across threads as in
int8_matvec. Every token of every pass runs the same per-block operations, so results do not depend on the
batch a token comes in (the lossless greedy speculation relies on it).
"""
import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from kernels_numba.cpu.matvec import quant_type as qt
from kernels_numba.cpu.matvec.amx_dot import (TILE_ROWS, TILE_TOKENS, group_dots_1, group_dots_2, group_dots_4, group_dots_8,
                                       group_dots_16)
from kernels_numba.cpu.ir.amx_tiles import AMX_IS_AVAILABLE, configure_tiles, release_tiles
from kernels_numba.cpu.parallel_policy import CHUNKS_PER_THREAD, PARALLEL_MIN_WORK, chunk_span, pool_threads

MAX_TILE_TOKENS = 16  # tokens per pass: the 16 int32 columns of a C tile
BLOCK_VALUES = 32
PREFETCH_GROUPS_AHEAD = 2  # each row group's 16 streams of ~700 bytes are too short for the hardware prefetcher


@register_jitable
def uses_amx(code):
    """Whether int8_matvec sends weights of this type here (Q8_0 where the CPU and OS allow AMX)."""
    return AMX_IS_AVAILABLE and code == qt.Q8_0


@register_jitable
def padded_tokens(num_tokens):
    """The tile width a pass of num_tokens tokens runs at (the next of TILE_TOKENS)."""
    for width in TILE_TOKENS:
        if width >= num_tokens:
            return width
    return MAX_TILE_TOKENS


@njit(cache=True)
def vnni_activations(quants, first_token, num_tokens):
    """quants int8 [n, k] -> [k / 32, 8, 4 * padded_tokens(num_tokens)]: per block the B tile of tokens
    first_token.., each row holding 4 consecutive quants of every token side by side (zero past num_tokens)."""
    num_blocks = quants.shape[1] // BLOCK_VALUES
    tiles = np.zeros((num_blocks, BLOCK_VALUES // 4, 4 * padded_tokens(num_tokens)), dtype=np.int8)
    for block in range(num_blocks):
        for group in range(BLOCK_VALUES // 4):
            for t in range(num_tokens):
                for j in range(4):
                    tiles[block, group, 4 * t + j] = quants[first_token + t, block * BLOCK_VALUES + 4 * group + j]
    return tiles


@njit(cache=True)
def padded_block_scales(scales, first_token, num_tokens):
    """[k / 32, 16] float32: each block's activation scales of tokens first_token.., zero past num_tokens."""
    padded = np.zeros((scales.shape[1], MAX_TILE_TOKENS), dtype=np.float32)
    for block in range(scales.shape[1]):
        for t in range(num_tokens):
            padded[block, t] = scales[first_token + t, block]
    return padded


@njit(cache=True, inline="always")
def _group_dots(width, data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes):
    if width == 1:
        group_dots_1(data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes)
    elif width == 2:
        group_dots_2(data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes)
    elif width == 4:
        group_dots_4(data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes)
    elif width == 8:
        group_dots_8(data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes)
    else:
        group_dots_16(data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes)


@njit(cache=True)
def _groups_into(data, x_tiles, x_scales, out, first_token, num_tokens, first_group, stop_group):
    """out[first_token + t, row] for the rows of tile groups first_group..stop_group-1."""
    width = x_tiles.shape[2] // 4
    totals = np.empty(TILE_ROWS * width, dtype=np.float32)
    sums = np.zeros(2 * TILE_ROWS * width, dtype=np.int32)  # two tile sets in flight
    prefetch_bytes = PREFETCH_GROUPS_AHEAD * TILE_ROWS * data.shape[1]
    configured_rows = 0
    for group in range(first_group, stop_group):
        first_row = group * TILE_ROWS
        num_rows = min(TILE_ROWS, data.shape[0] - first_row)
        if num_rows != configured_rows:
            configure_tiles(num_rows, BLOCK_VALUES, width)
            configured_rows = num_rows
        _group_dots(width, data, first_row, num_rows, x_tiles, x_scales, totals, sums, prefetch_bytes)
        for r in range(num_rows):
            for t in range(num_tokens):
                out[first_token + t, first_row + r] = totals[r * width + t]
    if configured_rows:
        release_tiles()


@njit(cache=True, nogil=True, parallel=True)
def _parallel_into(data, x_tiles, x_scales, out, first_token, num_tokens, chunks):
    num_groups = (data.shape[0] + TILE_ROWS - 1) // TILE_ROWS
    for chunk in prange(chunks):
        first, stop = chunk_span(chunk, chunks, num_groups)
        _groups_into(data, x_tiles, x_scales, out, first_token, num_tokens, first, stop)


@njit(cache=True)
def amx_matvec_into(data, quants, scales, out):
    """out[t] = dot of every row of Q8_0 data with the 8-bit activations (quants, scales) of
    int8_dot.quantize_activations_into."""
    if not AMX_IS_AVAILABLE:  # its tile instructions were compiled to nothing (amx_tiles.amx_call)
        raise RuntimeError("AMX tiles are not available on this CPU")
    n, k = quants.shape
    threads = pool_threads()
    num_groups = (data.shape[0] + TILE_ROWS - 1) // TILE_ROWS
    for first_token in range(0, n, MAX_TILE_TOKENS):
        num_tokens = min(MAX_TILE_TOKENS, n - first_token)
        x_tiles = vnni_activations(quants, first_token, num_tokens)
        x_scales = padded_block_scales(scales, first_token, num_tokens)
        if threads > 1 and data.shape[0] * k >= PARALLEL_MIN_WORK:
            _parallel_into(data, x_tiles, x_scales, out, first_token, num_tokens,
                           max(1, min(num_groups, CHUNKS_PER_THREAD * threads)))
        else:
            _groups_into(data, x_tiles, x_scales, out, first_token, num_tokens, 0, num_groups)
