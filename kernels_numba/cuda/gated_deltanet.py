"""Gated DeltaNet ops on the device: short causal conv + SiLU, the delta rule, l2 normalisation.

Same signatures as kernels_numba/cpu/gated_deltanet.py. States are float32 and updated in place: a device state
is updated where it lives; a host (numpy) state, as the recurrent state pool holds them, is uploaded and the
result copied back into it. The delta rule is column-separable: column j of S only needs k, q and column j of
v, so one thread owns one (head, value column) and runs the tokens in order with no barrier. Prefill uses the
same token loop (gated_delta_rule_chunked takes chunk_size for the signature only; the WY chunked form with
tensor cores is not written yet).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from kernels_numba.cuda.device_arrays import as_device, empty, is_device_array, parameter
from kernels_numba.cuda.launch_shape import THREADS, WARPS_PER_BLOCK, flat_blocks, row_blocks
from kernels_numba.cuda.launch_stream import current_stream
from kernels_numba.cuda.warp_reduce import WARP_SIZE, warp_sum
from kernels_numba.reference_deltanet import DEFAULT_CHUNK_SIZE


@cuda.jit
def conv1d_silu_kernel(x, weight, conv_state, out):
    """One thread per channel c: y_t = silu(sum_j weight[c, j] x_{t-K+1+j}), then the state keeps the last K-1."""
    num_tokens, channels = x.shape
    history = weight.shape[1] - 1
    for c in range(cuda.grid(1), channels, cuda.gridsize(1)):
        for t in range(num_tokens):
            total = np.float32(0.0)
            for j in range(history + 1):
                src = t - history + j  # < 0: from the state
                value = conv_state[history + src, c] if src < 0 else x[src, c]
                total += weight[c, j] * value
            out[t, c] = total / (np.float32(1.0) + math.exp(-total))
        # row r of the new state is row num_tokens + r of [state; x]: a row read is never one already written
        for r in range(history):
            src = num_tokens + r
            conv_state[r, c] = conv_state[src, c] if src < history else x[src - history, c]


@cuda.jit
def delta_rule_kernel(q, k, v, g, beta, state, out):
    """One thread per (head h, value column j), tokens in order: S <- exp(g) S; kv = S^T k;
    S <- S + k (beta (v - kv)); o = S^T q, each on column j of S only (neighbouring threads: neighbouring j)."""
    num_tokens, num_heads, key_dim = q.shape
    value_dim = v.shape[2]
    for item in range(cuda.grid(1), num_heads * value_dim, cuda.gridsize(1)):
        h, j = item // value_dim, item % value_dim
        for t in range(num_tokens):
            decay = math.exp(g[t, h])
            kv_mem = np.float32(0.0)
            for i in range(key_dim):
                s = state[h, i, j] * decay
                state[h, i, j] = s
                kv_mem += s * k[t, h, i]
            delta = (v[t, h, j] - kv_mem) * beta[t, h]
            o = np.float32(0.0)
            for i in range(key_dim):
                s = state[h, i, j] + k[t, h, i] * delta
                state[h, i, j] = s
                o += s * q[t, h, i]
            out[t, h, j] = o


@cuda.jit
def l2_normalize_kernel(x, eps, out):
    """One warp per row of x [rows, dim]: x * rsqrt(sum(x^2) + eps)."""
    first_row = cuda.blockIdx.x * WARPS_PER_BLOCK + cuda.threadIdx.x // WARP_SIZE
    lane = cuda.threadIdx.x % WARP_SIZE
    for row in range(first_row, x.shape[0], cuda.gridDim.x * WARPS_PER_BLOCK):  # whole warps stride together
        squares = np.float32(0.0)
        for c in range(lane, x.shape[1], WARP_SIZE):
            squares += x[row, c] * x[row, c]
        inv_norm = np.float32(1.0) / math.sqrt(warp_sum(squares) + eps)
        for c in range(lane, x.shape[1], WARP_SIZE):
            out[row, c] = x[row, c] * inv_norm


def _device_state(state):
    """(the device array to update, the host array to copy it back into or None)."""
    if is_device_array(state):
        return state, None
    if state.dtype != np.float32 or not state.flags.c_contiguous:
        raise ValueError(f"a Gated DeltaNet state must be C-contiguous float32, got {state.dtype}")
    return cuda.to_device(state), state


def _copy_back(device_state, host_state) -> None:
    if host_state is not None:
        device_state.copy_to_host(host_state)


def conv1d_silu(x, weight, conv_state):
    """x: [T, C], weight: [C, K], conv_state: [K-1, C] (float32, updated) -> silu(causal depthwise conv) [T, C]."""
    x = as_device(x)
    state, host_state = _device_state(conv_state)
    out = empty(tuple(x.shape), np.float32)
    if x.shape[0] and x.shape[1]:
        conv1d_silu_kernel[flat_blocks(x.shape[1]), THREADS, current_stream()](x, parameter(weight), state, out)
        _copy_back(state, host_state)
    return out


def gated_delta_rule_recurrent(q, k, v, g, beta, state):
    """q, k: [T, H, d_k], v: [T, H, d_v], g, beta: [T, H], state: float32 [H, d_k, d_v] -> o [T, H, d_v]."""
    q, k, v, g, beta = (as_device(a) for a in (q, k, v, g, beta))
    device_state, host_state = _device_state(state)
    out = empty(tuple(v.shape), np.float32)
    columns = v.shape[1] * v.shape[2]
    if q.shape[0] and columns:
        delta_rule_kernel[flat_blocks(columns), THREADS, current_stream()](q, k, v, g, beta, device_state, out)
        _copy_back(device_state, host_state)
    return out


def gated_delta_rule_chunked(q, k, v, g, beta, state, chunk_size: int = DEFAULT_CHUNK_SIZE):
    """The same result as gated_delta_rule_recurrent (prefill); on the device, the same token loop."""
    if chunk_size < 1:
        raise ValueError(f"gated_delta_rule_chunked: chunk_size {chunk_size} < 1")
    return gated_delta_rule_recurrent(q, k, v, g, beta, state)


def l2_normalize(x, eps: float = 1e-6):
    """x * rsqrt(sum(x^2) + eps) over the last axis -> device array of x's shape."""
    x = as_device(x)
    shape = tuple(x.shape)
    rows = x.reshape(-1, shape[-1])
    out = empty(shape, np.float32)
    if rows.shape[0]:
        l2_normalize_kernel[row_blocks(rows.shape[0]), WARPS_PER_BLOCK * WARP_SIZE, current_stream()](
            rows, np.float32(eps), out.reshape(rows.shape))
    return out
