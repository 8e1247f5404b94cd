"""A first run's side and tail children compile the fused decode step's kernels without loading the model
(pocketcli/commands/first_run.py, generate's rehearse_decode and rehearse_decode_tail).

Their types hold nothing of the weights but whether every matrix takes the 8-bit run path, which the weights'
types tell (kernels_numba.cpu.decode_stack.compile_decode_step), so no weight is read for them. The side child
compiled them after loading the model, whose kernels the chain of children was compiling at the same moment on
the other core: its first ~18 s went to kernels the chain compiled too. Now it starts with the decode step's, in
the reverse of the order the chain meets the kernels they share, and the tail child starts compiling at once.
"""
from __future__ import annotations

from gguf_loader.hparams import read_hparams
from kernels_numba import get_ops
from kernels_numba.kv_type import kv_type_named

from ..config import EngineConfig
from ..model_source import open_model_file, vocab_size_of
from ..models import make_model


def compile_decode_step_ahead(config: EngineConfig, is_tail: bool = False) -> bool:
    """Compiles (or loads) the fused decode step's kernels for config's model from its header and weights' types,
    reading no weight (is_tail: the tail child's part); False where nothing applies (another backend, --tp, a model
    without the fused layer)."""
    if config.backend != "cpu" or config.tp_size != 1:
        return False
    model_file = open_model_file(config.model_path)
    model = make_model(model_file, read_hparams(model_file.metadata, vocab_size_of(model_file)), get_ops("cpu"))
    return model.compile_decode_step(kv_type_named(config.kv_type).code, is_tail=is_tail)
