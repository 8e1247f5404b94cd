"""Reinterpreting raw bits as float32 inside numba kernels (numba has no float16 type on CPU).

Two tiny LLVM intrinsics: fp16 bits -> float32 (`fpext half`, a single vcvtph2ps on x86 with F16C, exact for
every value) and uint32 bits -> float32 (a bitcast, used for bf16 and f32 rows stored as bytes).
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


def _integer_of_width(builder, value, width):
    target = ir.IntType(width)
    if value.type.width > width:
        return builder.trunc(value, target)
    if value.type.width < width:
        return builder.zext(value, target)
    return value


@intrinsic
def half_bits_to_float32(typingctx, bits):
    """The float32 value of the IEEE fp16 bit pattern in the low 16 bits of an integer."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        half = builder.bitcast(_integer_of_width(builder, args[0], 16), ir.HalfType())
        return builder.fpext(half, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def bits_to_float32(typingctx, bits):
    """The float32 whose IEEE bit pattern is the low 32 bits of an integer."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(_integer_of_width(builder, args[0], 32), ir.FloatType())

    return types.float32(bits), codegen


@njit(cache=True)
def read_half(raw, offset):
    """The little-endian fp16 at byte `offset` of a uint8 array, as float32."""
    return half_bits_to_float32(np.int32(raw[offset]) | (np.int32(raw[offset + 1]) << 8))
