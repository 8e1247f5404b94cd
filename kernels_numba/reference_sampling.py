"""Plain numpy reference for the sampling kernels: the exact softmax draw they must reproduce."""
from __future__ import annotations

import numpy as np


def softmax_draw_rows(logits: np.ndarray, row_ids: np.ndarray, inverse_temperatures: np.ndarray,
                      uniforms: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """For each i, the token drawn from softmax(logits[row_ids[i]] * inverse_temperatures[i]) by inverse CDF at
    uniforms[i] in [0, 1): the first index whose running sum of probabilities exceeds uniforms[i] (a zero
    probability is never drawn). out[i] = -1 where no token can be drawn (a NaN or +inf logit, or every logit
    -inf). logits: [rows, vocab]; returns out: [len(row_ids)] int64."""
    out = np.empty(len(row_ids), dtype=np.int64) if out is None else out
    for i, row_id in enumerate(row_ids):
        row = logits[row_id].astype(np.float64)
        top = np.max(row)
        if np.isnan(row).any() or not np.isfinite(top):
            out[i] = -1
            continue
        weights = np.exp((row - top) * inverse_temperatures[i])
        running = np.cumsum(weights)
        index = int(np.searchsorted(running, uniforms[i] * running[-1], side="right"))
        out[i] = index if index < row.size else int(np.flatnonzero(weights)[-1])
    return out
