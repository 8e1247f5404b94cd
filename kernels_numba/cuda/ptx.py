"""Every kernel of the CUDA backend with the argument types its launcher passes, compiled to PTX for an
architecture without a GPU (numba.cuda.compile_ptx): checked by tests/cuda/test_cuda_ptx.py and sized by
scripts/ptx_report.py (ptxas -v)."""
from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

from numba import cuda, types

from kernels_numba.cuda.activation import columns_kernel, elementwise_kernel
from kernels_numba.cuda.array_layout import place_kernel, repeat_rows_kernel
from kernels_numba.cuda.attention import paged_attention_kernel
from kernels_numba.cuda.deltanet_heads import expand_heads_kernel, gated_rms_norm_kernel, gates_kernel
from kernels_numba.cuda.gated_attention import partial_rope_kernel, sigmoid_mul_kernel
from kernels_numba.cuda.dequant import dequantize_rows_kernel
from kernels_numba.cuda.gated_deltanet import conv1d_silu_kernel, delta_rule_kernel, l2_normalize_kernel
from kernels_numba.cuda.kv_store import store_kv_kernel
from kernels_numba.cuda.matvec import matvec_kernel
from kernels_numba.cuda.moe import combine_kernel, expert_matvec_kernel, route_kernel
from kernels_numba.cuda.norm import rms_norm_kernel
from kernels_numba.cuda.rotary import rope_kernel
from kernels_numba.cuda.sampler import top_k_kernel

ARCHITECTURES = ((8, 0), (8, 6), (8, 9), (9, 0))  # A100, RTX 30xx / A10, L4 / RTX 40xx, H100 / H200

_u8_2d, _i32_1d, _i32_2d, _i64_1d = types.uint8[:, ::1], types.int32[::1], types.int32[:, ::1], types.int64[::1]
_u8_4d = types.uint8[:, :, :, ::1]
_i64_2d = types.int64[:, ::1]
_f32_1d, _f32_2d, _f32_3d, _f32_4d = (types.float32[::1], types.float32[:, ::1], types.float32[:, :, ::1],
                                      types.float32[:, :, :, ::1])
_i64, _f32, _f64, _bool = types.int64, types.float32, types.float64, types.boolean

KERNEL_SIGNATURES = {
    "dequantize_rows": (dequantize_rows_kernel, (_u8_2d, _i64, _f32_2d, _i64, _i64, _i32_1d, _f32_2d)),
    "matvec": (matvec_kernel, (_u8_2d, _i64, _f32_2d, _i64, _i64, _f32_2d, _f32_2d)),
    "rms_norm": (rms_norm_kernel, (_f32_2d, _f32_1d, _f32, _f32_2d)),
    "elementwise": (elementwise_kernel, (_i64, _f32_1d, _f32_1d, _f32, _f32_1d)),
    "columns": (columns_kernel, (_f32_2d, _i64, _f32_1d, _bool, _f32_2d)),
    "rope": (rope_kernel, (_f32_3d, _i64_1d, _f64, _bool, _f64, _f32_1d, _bool, _f32_3d)),
    "store_kv": (store_kv_kernel, (_f32_3d, _f32_3d, _f32_4d, _f32_4d, _i64_1d, _i64)),
    "store_kv_bytes": (store_kv_kernel, (_f32_3d, _f32_3d, _u8_4d, _u8_4d, _i64_1d, _i64)),  # every other KV type
    "paged_attention": (paged_attention_kernel, (_f32_3d, _f32_4d, _f32_4d, _i64, _i32_2d, _i32_1d, _i32_1d, _f32,
                                                 _i64, _f32, _f32_3d)),
    "paged_attention_bytes": (paged_attention_kernel, (_f32_3d, _u8_4d, _u8_4d, _i64, _i32_2d, _i32_1d, _i32_1d,
                                                       _f32, _i64, _f32, _f32_3d)),
    "top_k": (top_k_kernel, (_f32_2d, _i64, _f32_2d, _i32_2d)),
    "moe_route": (route_kernel, (_f32_2d, _i64, _bool, _i64_2d, _f32_2d)),
    "expert_matvec": (expert_matvec_kernel, (_u8_2d, _i64, _f32_2d, _i64, _i64, _i64, _f32_2d, _i64_1d, _f32_2d)),
    "moe_combine": (combine_kernel, (_f32_2d, _f32_2d, _f32_2d)),
    "conv1d_silu": (conv1d_silu_kernel, (_f32_2d, _f32_2d, _f32_2d, _f32_2d)),
    "delta_rule": (delta_rule_kernel, (_f32_3d, _f32_3d, _f32_3d, _f32_2d, _f32_2d, _f32_3d, _f32_3d)),
    "l2_normalize": (l2_normalize_kernel, (_f32_2d, _f32, _f32_2d)),
    "deltanet_gates": (gates_kernel, (_f32_2d, _f32_2d, _f32_1d, _f32_1d, _f32_2d, _f32_2d)),
    "expand_heads": (expand_heads_kernel, (_f32_3d, _bool, _f32, _f32_3d)),
    "gated_rms_norm": (gated_rms_norm_kernel, (_f32_2d, _f32_1d, _f32_2d, _f32, _f32_2d)),
    "sigmoid_mul": (sigmoid_mul_kernel, (_f32_2d, _f32_2d, _f32_2d)),
    "partial_rope": (partial_rope_kernel, (_f32_3d, _i64_1d, _f64, _i64, _f32_3d)),
    "place": (place_kernel, (_f32_2d, _f32_2d, _i64, _i64)),
    "repeat_rows": (repeat_rows_kernel, (_f32_2d, _i64, _f32_2d)),
}


@contextmanager
def _compiling_for(cc: tuple[int, int]):
    """Device functions compile for the current GPU's architecture; without a GPU, pretend one of `cc`."""
    from numba.cuda import dispatcher

    if cuda.is_available():
        yield
        return
    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def kernel_ptx(name: str, cc: tuple[int, int]) -> str:
    """The PTX of kernel `name` for compute capability `cc` (raises on a compile error)."""
    kernel, signature = KERNEL_SIGNATURES[name]
    with _compiling_for(cc):
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=cc)
    return ptx
