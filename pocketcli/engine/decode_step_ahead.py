"""A first run's side and tail children compile the fused decode step's kernels without loading the model
(pocketcli/commands/first_run.py, generate's rehearse_decode and rehearse_decode_tail).

Their types hold nothing of the weights but whether every matrix takes the 8-bit run path, which the weights'
types tell (kernels_numba.cpu.decode_stack.compile_decode_step), so no weight is read for them. The side child
compiled them after loading the model, whose kernels the chain of children was compiling at the same moment on
the other core: its first ~18 s went to kernels the chain compiled too. Now it starts with the decode step's, in
the reverse of the order the chain meets the kernels they share, and the tail child starts compiling at once.
"""
from __future__ import annotations

import os

from gguf_loader.hparams import read_hparams
import kernels_numba
from kernels_numba import get_ops
from kernels_numba.kv_type import DEFER_ROW_CODECS_ENV, kv_type_named

from ..config import EngineConfig
from ..model_source import open_model_file, vocab_size_of
from ..models import make_model


def compile_decode_step_ahead(config: EngineConfig, is_tail: bool = False) -> bool:
    """Compiles (or loads) the fused decode step's kernels for config's model from its header and weights' types,
    reading no weight (is_tail: the tail child's part); False where nothing applies (another backend, --tp, a model
    without the fused layer). On the CPU the KV row codecs are registered when it returns, whatever it compiled."""
    if config.backend != "cpu":
        return False
    is_compiled = config.tp_size == 1 and _compile_decode_step(config, is_tail)
    kernels_numba.register_row_codecs()  # deferred in a side child (defer_row_codecs): registered for whatever it runs next
    return is_compiled


def _compile_decode_step(config: EngineConfig, is_tail: bool) -> bool:
    model_file = open_model_file(config.model_path)
    model = make_model(model_file, read_hparams(model_file.metadata, vocab_size_of(model_file)), get_ops("cpu"))
    return model.compile_decode_step(kv_type_named(config.kv_type).code, is_tail=is_tail)


def defer_row_codecs() -> None:
    """A side child's first step, before it imports the kernels: the KV row codecs are registered (compiled, or
    loaded from the cache) only once compile_decode_step_ahead needs them, after the mat-vec leaves, while the
    chain compiles them (kernels_numba/cpu/kv_row.py)."""
    os.environ[DEFER_ROW_CODECS_ENV] = "1"
