"""Threads per block: full-size on a GPU; one warp per block under the simulator, where every thread is a
Python thread and each block barrier polls them all (the kernels are written for any warp count)."""
from numba import config

SIMULATED = bool(config.ENABLE_CUDASIM)
WARPS_PER_BLOCK = 1 if SIMULATED else 4  # row kernels: one warp per row (norm) or per query head (attention)
MATVEC_WARPS = 1 if SIMULATED else 4  # mat-vec: one warp per group of 8 output rows (matvec.py)
THREADS = 32 if SIMULATED else 256  # element-wise kernels: one thread per value
SAMPLER_WARPS = 2 if SIMULATED else 8  # a block per logits row; two warps still exercise the cross-warp step
MAX_FLAT_BLOCKS = 1 if SIMULATED else 4096  # element-wise kernels stride over the rest (grid-stride loops)
# mat-vec row groups (grid x) and token chunks (grid y): one block strides over them all in the simulator; on a
# GPU every row group has its warp (x goes to 2**31 - 1) and y stops at CUDA's 65535
MAX_ROW_BLOCKS = 1 if SIMULATED else 2**31 - 1
MAX_GRID_Y = 1 if SIMULATED else 65535


def flat_blocks(count: int) -> int:
    """Blocks for `count` values handled by grid-stride loops of THREADS threads per block."""
    return max(1, min(MAX_FLAT_BLOCKS, -(-count // THREADS)))


def row_blocks(num_rows: int) -> int:
    """Blocks for kernels with one warp per row, striding over the rows beyond the grid."""
    return max(1, min(MAX_FLAT_BLOCKS, -(-num_rows // WARPS_PER_BLOCK)))
