"""Element-wise ops on the device: activations, gated products, soft-capping, and the tensor arithmetic the
model does between ops (residual add, scaling, bias, column splits), so activations never leave the device."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty, parameter
from kernels_numba.cuda.launch_shape import THREADS, flat_blocks
from kernels_numba.cuda.launch_stream import current_stream

SILU, GELU_TANH, SILU_MUL, GELU_MUL, SOFTCAP, ADD, SCALE = range(7)
GELU_SQRT_2_OVER_PI = np.float32(0.7978845608028654)
GELU_COEF_A = np.float32(0.044715)


@cuda.jit(device=True)
def silu_value(x):
    return x / (np.float32(1.0) + math.exp(-x))


@cuda.jit(device=True)
def sigmoid_value(x):
    """1 / (1 + exp(-x)), with exp of a non-positive number only (no overflow)."""
    if x >= 0:
        return np.float32(1.0) / (np.float32(1.0) + math.exp(-x))
    e = math.exp(x)
    return e / (np.float32(1.0) + e)


@cuda.jit(device=True)
def gelu_tanh_value(x):
    inner = GELU_SQRT_2_OVER_PI * x * (np.float32(1.0) + GELU_COEF_A * x * x)
    return np.float32(0.5) * x * (np.float32(1.0) + math.tanh(inner))


@cuda.jit
def elementwise_kernel(kind, a, b, number, out):
    """out[i] = f(a[i], b[i]) over flat arrays; `number` is the cap (SOFTCAP) or factor (SCALE)."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        x = a[i]
        if kind == SILU:
            out[i] = silu_value(x)
        elif kind == GELU_TANH:
            out[i] = gelu_tanh_value(x)
        elif kind == SILU_MUL:
            out[i] = silu_value(x) * b[i]
        elif kind == GELU_MUL:
            out[i] = gelu_tanh_value(x) * b[i]
        elif kind == SOFTCAP:
            out[i] = number * math.tanh(x / number)
        elif kind == ADD:
            out[i] = x + b[i]
        else:
            out[i] = x * number


def _launch(kind, a, b=None, number=0.0, out=None):
    a = as_device(a)
    b = a if b is None else as_device(b)
    result = empty(tuple(a.shape), np.float32, out)
    flat = a.reshape(-1)
    if flat.size:
        elementwise_kernel[flat_blocks(flat.size), THREADS, current_stream()](
            kind, flat, b.reshape(-1), np.float32(number), result.reshape(-1))
    return result


def silu(x, out=None):
    return _launch(SILU, x, out=out)


def gelu_tanh(x, out=None):
    return _launch(GELU_TANH, x, out=out)


def silu_mul(gate, up, out=None):
    return _launch(SILU_MUL, gate, up, out=out)


def gelu_mul(gate, up, out=None):
    return _launch(GELU_MUL, gate, up, out=out)


def softcap(x, cap, out=None):
    return _launch(SOFTCAP, x, number=cap, out=out)


def add(a, b, out=None):
    """a + b (same shapes): the residual adds of the model."""
    return _launch(ADD, a, b, out=out)


def scale(x, factor, out=None):
    """x * factor (embedding scale)."""
    return _launch(SCALE, x, number=factor, out=out)


@cuda.jit
def columns_kernel(y, first, bias, has_bias, out):
    """out[t, c] = y[t, first + c] (+ bias[c])."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        t, c = i // out.shape[1], i % out.shape[1]
        value = y[t, first + c]
        out[t, c] = value + bias[c] if has_bias else value


def _columns(y, first, width, bias=None):
    out = empty((y.shape[0], width), np.float32)
    if out.size:
        b = parameter(bias) if bias is not None else y.reshape(-1)
        columns_kernel[flat_blocks(out.size), THREADS, current_stream()](y, first, b, bias is not None, out)
    return out


def split_columns(y, widths):
    """y: [T, sum(widths)] -> contiguous device arrays [T, width] (the projections of a stacked weight)."""
    y = as_device(y)
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(int)
    return [_columns(y, int(first), int(width)) for first, width in zip(starts, widths)]


def add_bias(y, bias):
    """y: [T, n] + bias [n] -> a new device array."""
    y = as_device(y)
    return _columns(y, 0, y.shape[1], bias)
