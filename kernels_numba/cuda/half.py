"""Raw IEEE bits -> float32 on the device, by exact integer and power-of-two arithmetic.

numba's CUDA target and its simulator share no bit-cast, so the mantissa (with its implicit bit) is converted to
float32 and multiplied by a power of two from a table: both steps are exact, so the result equals a bit-cast.
"""
import math

import numpy as np
from numba import cuda

HALF_POW2 = np.array([2.0 ** (max(e, 1) - 25) for e in range(32)], dtype=np.float32)  # fp16: 2^(e-15-10)
FLOAT_POW2 = np.array([2.0 ** (max(e, 1) - 150) for e in range(256)], dtype=np.float32)  # fp32: 2^(e-127-23)


@cuda.jit(device=True)
def half_to_float(bits):
    """The float32 value of the fp16 bit pattern in the low 16 bits of `bits` (an int32)."""
    exponent = (bits >> 10) & 31
    mantissa = bits & 1023
    if exponent == 31:
        value = np.float32(math.inf) if mantissa == 0 else np.float32(math.nan)
    elif exponent == 0:
        value = np.float32(mantissa) * HALF_POW2[0]
    else:
        value = np.float32(mantissa | 1024) * HALF_POW2[exponent]
    return -value if (bits >> 15) & 1 else value


@cuda.jit(device=True)
def float_from_bits(bits):
    """The float32 whose bit pattern is the low 32 bits of `bits` (an int64)."""
    exponent = (bits >> 23) & 255
    mantissa = bits & 0x7FFFFF
    if exponent == 255:
        value = np.float32(math.inf) if mantissa == 0 else np.float32(math.nan)
    elif exponent == 0:
        value = np.float32(mantissa) * FLOAT_POW2[0]
    else:
        value = np.float32(mantissa | 0x800000) * FLOAT_POW2[exponent]
    return -value if (bits >> 31) & 1 else value


@cuda.jit(device=True)
def read_half(data, row, offset):
    """The little-endian fp16 at byte `offset` of row `row` of a uint8 matrix, as float32."""
    return half_to_float(np.int32(data[row, offset]) | (np.int32(data[row, offset + 1]) << 8))


@cuda.jit(device=True)
def read_u32(data, row, offset):
    """The little-endian uint32 at byte `offset` of row `row`, as int64."""
    return (np.int64(data[row, offset]) | (np.int64(data[row, offset + 1]) << 8)
            | (np.int64(data[row, offset + 2]) << 16) | (np.int64(data[row, offset + 3]) << 24))
