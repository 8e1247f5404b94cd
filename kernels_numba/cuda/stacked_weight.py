"""Projections of one input by several weights of one quant type and row length as ONE mat-vec: the weights' rows
stacked into one weight (a host copy made once, uploaded once), whose output the model splits into each
projection's columns. Fewer kernel launches a layer (q/k/v, gate/up): a device step is bound by them at small
batches."""
from __future__ import annotations

import numpy as np

from gguf_loader import make_weight_tensor
from gguf_loader.weight_tensor import WeightTensor

_STACKED: dict[tuple[int, ...], tuple[tuple[WeightTensor, ...], WeightTensor]] = {}  # ids -> (parts, stacked)


def stack_weights(weights: tuple[WeightTensor, ...]) -> tuple[WeightTensor, ...]:
    """The weights as this backend multiplies them: one weight holding all their rows, in order."""
    weights = tuple(weights)
    return weights if len(weights) == 1 else (_stacked(weights),)


def _stacked(parts: tuple[WeightTensor, ...]) -> WeightTensor:
    key = tuple(id(w) for w in parts)
    cached = _STACKED.get(key)
    if cached is None or any(a is not b for a, b in zip(cached[0], parts)):
        raw = np.concatenate([np.asarray(w.data) for w in parts])
        raw.flags.writeable = False
        tensor = make_weight_tensor("+".join(w.name for w in parts), parts[0].ggml_type,
                                    (raw.shape[0], parts[0].row_length), raw)
        cached = _STACKED[key] = (parts, tensor)
    return cached[1]
