"""The numba types of the arrays every mat-vec leaf kernel takes (ir/native_call.py: a leaf is compiled for exact
argument types before the glue that calls it runs, and the glue's call sites must pass these)."""
from numba import types

WEIGHTS_TYPE = types.Array(types.uint8, 2, "C", readonly=True)  # dequant.readonly_bytes / run_layout rows
OUT_TYPE = types.Array(types.float32, 2, "C")  # outputs, float32 activations and per-token sums
ROW_IDS_TYPE = types.Array(types.int64, 1, "C")
