"""numba CPU kernels: the same ops, with the same signatures, as kernels_numba.reference."""
import os
from pathlib import Path

from numba.core import entrypoints as _numba_entrypoints
from numba.core.registry import cpu_target

from kernels_numba import numba_cache_load as _numba_cache_load, nrt_cache as _nrt_cache
from kernels_numba.cpu import cache_guard as _cache_guard
from kernels_numba.cpu.ir import byte_dot as _byte_dot, half_symbols as _half_symbols
from kernels_numba.kv_type import DEFER_ROW_CODECS_ENV

_cache_guard.clear_stale_numba_cache(Path(__file__).parent)
# a warm start loads every kernel from the cache: without readying numba for compiles it does not make
_numba_cache_load.install_lean_cache_loads()
_nrt_cache.install_nrt_cache(_cache_guard.numba_cache_dir(Path(__file__).parent))
# Our kernels use no numba extension; numba's first compile or cache load would otherwise read the entry points of
# every installed distribution to find some (50-90 ms of each start).
_numba_entrypoints._already_initialized = True
# x86 without F16C: before any kernel compiles
_half_symbols.register_half_conversions(_byte_dot.target_features(cpu_target.target_context))

from kernels_numba.cpu import kv_row as _kv_row  # noqa: E402

if os.environ.get(DEFER_ROW_CODECS_ENV) != "1":  # a first run's side child registers them itself, later
    _kv_row.register_row_codecs()  # before any kernel that calls the KV row codecs compiles or loads

from kernels_numba.cpu.activation import gelu_mul, gelu_tanh, silu, silu_mul, softcap  # noqa: E402
from kernels_numba.cpu.attention import paged_attention  # noqa: E402
from kernels_numba.cpu.decode_layer import decode_layer, plan_decode_layer  # noqa: E402
from kernels_numba.cpu.decode_stack import compile_decode_step, decode_layers  # noqa: E402
from kernels_numba.cpu.dequant import dequantize, dequantize_rows, embedding  # noqa: E402
from kernels_numba.cpu.kv_store import store_kv  # noqa: E402
from kernels_numba.cpu.matvec.dispatch import linear  # noqa: E402
from kernels_numba.cpu.norm import rms_norm  # noqa: E402
from kernels_numba.cpu.matvec.quant_type import SUPPORTED_TYPES  # noqa: E402
from kernels_numba.cpu.rotary import rope  # noqa: E402
from kernels_numba.cpu.moe import moe_combine, moe_linear, moe_route  # noqa: E402
from kernels_numba.cpu.gated_deltanet import (conv1d_silu, gated_delta_rule_chunked,  # noqa: E402
                                              gated_delta_rule_recurrent, l2_normalize)
from kernels_numba.cpu.hybrid_glue import (deltanet_gates, expand_heads, gated_rms_norm,  # noqa: E402
                                           rope_partial, sigmoid_mul)
# the glue between ops, memory and top-k: numpy's own loops on the host (kernels_numba/host_arrays.py)
from kernels_numba.host_arrays import *  # noqa: E402,F401,F403  (host_arrays.__all__: a new glue op lands once)

__all__ = ["dequantize", "dequantize_rows", "embedding", "linear", "rms_norm", "rope", "silu", "gelu_tanh",
           "silu_mul", "gelu_mul", "softcap", "store_kv", "paged_attention"]
