"""numba-cuda kernels: the ops of kernels_numba.reference with the same signatures, on an NVIDIA GPU.

Inputs may be numpy or device arrays; outputs are device arrays (`to_host` copies one back). Weights are
uploaded once and stay quantized on the device. Under NUMBA_ENABLE_CUDASIM=1 the same kernels run in numba's
simulator (warp shuffles supplied by sim_shuffle, race-free shared arrays by sim_shared_memory), which is how
they are tested without a GPU.
"""
from numba import config as _numba_config

if _numba_config.ENABLE_CUDASIM:
    from kernels_numba.cuda import sim_shared_memory as _sim_shared_memory, sim_shuffle as _sim_shuffle

    _sim_shuffle.install_simulated_shuffles()
    _sim_shared_memory.install_locked_shared_arrays()

from kernels_numba.cuda.activation import (add, add_bias, gelu_mul, gelu_tanh, scale, silu, silu_mul,  # noqa: E402
                                           softcap, split_columns)
from kernels_numba.cuda.attention import paged_attention  # noqa: E402
from kernels_numba.cuda.dequant import dequantize, dequantize_rows, embedding  # noqa: E402
from kernels_numba.cuda.device_arrays import (as_device as to_device, can_write_into, contiguous,  # noqa: E402
                                              free_memory_bytes, is_device_array, to_host, zeros)
from kernels_numba.cuda.device_weight import SUPPORTED_TYPES, upload_weight, uploaded_bytes  # noqa: E402
from kernels_numba.cuda.kv_store import store_kv  # noqa: E402
from kernels_numba.cuda.matvec import linear  # noqa: E402
from kernels_numba.cuda.stacked_weight import stack_weights  # noqa: E402
from kernels_numba.cuda.norm import rms_norm  # noqa: E402
from kernels_numba.cuda.rotary import rope  # noqa: E402
from kernels_numba.cuda.sampler import MAX_TOP_K, argmax, top_k, top_k_on_device  # noqa: E402
from kernels_numba.cuda.moe import moe_combine, moe_linear, moe_route  # noqa: E402
from kernels_numba.cuda.gated_deltanet import (conv1d_silu, gated_delta_rule_chunked,  # noqa: E402
                                               gated_delta_rule_recurrent, l2_normalize)
from kernels_numba.cuda.deltanet_heads import deltanet_gates, expand_heads, gated_rms_norm  # noqa: E402
from kernels_numba.cuda.gated_attention import rope_partial, sigmoid_mul  # noqa: E402
from kernels_numba.cuda.array_layout import (assign, concat_columns, concat_rows, copy_array,  # noqa: E402
                                             fill_zeros, repeat_rows)

__all__ = ["dequantize", "dequantize_rows", "embedding", "linear", "rms_norm", "rope", "silu", "gelu_tanh",
           "silu_mul", "gelu_mul", "softcap", "store_kv", "paged_attention",
           "add", "add_bias", "scale", "split_columns", "argmax", "top_k", "top_k_on_device", "MAX_TOP_K",
           "to_device", "to_host", "zeros", "contiguous", "can_write_into", "free_memory_bytes", "stack_weights",
           "is_device_array",
           "upload_weight", "uploaded_bytes", "SUPPORTED_TYPES",
           "moe_route", "moe_linear", "moe_combine",
           "conv1d_silu", "gated_delta_rule_recurrent", "gated_delta_rule_chunked", "l2_normalize",
           "deltanet_gates", "expand_heads", "gated_rms_norm", "rope_partial", "sigmoid_mul",
           "assign", "concat_columns", "concat_rows", "copy_array", "fill_zeros", "repeat_rows"]
