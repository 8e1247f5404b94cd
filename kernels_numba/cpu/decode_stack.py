"""Every decoder layer of a decode step in one njit call: decode_layer.decode_layer_into layer after layer, its
per-layer arguments held in a numba typed List.

Called from Python once a layer, decode_layer_into unboxed ~20 arguments each time (tuples of weights, their
kernels, norms, the caches), and decode_layer packed them: 7-8 us a layer, 0.2-0.4 ms of a SmolLM2 decode step (30
layers, ~3.8 ms at one sequence). A typed List crosses into compiled code as one pointer, so a step now unboxes
its arguments once. The List is built once per token count and caches (a DecodeStack, kept on the first plan: the
mat-vecs' kernels differ by token count; ~10 ms to build for SmolLM2, ~1.4 us to find again), and each layer is
called through decode_layer_into's address (ir/native_call.py): the loop compiles in a moment instead of
optimising the whole layer again. The same calls with the same arguments as decode_layer's, so the same bits.
SmolLM2 Q4_1, AVX2 tier, 2 threads, 2-vCPU Intel Xeon, engine steps alternated in one process
(/tmp/s24/ab_stack.py): 1 sequence 3.81 -> 3.41 ms, 8 sequences 12.94 -> 11.98 ms.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit
from numba.typed import List

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.cpu.decode_layer import (DecodeLayerPlan, decode_layer_into, decode_layer_tail_into, fused_codes,
                                            mixed_paths_of, type_plan)
from kernels_numba.cpu.ir.native_call import NO_KERNEL, call_native, native_kernel
from kernels_numba.cpu.kv_row import register_row_codecs
from kernels_numba.cpu.matvec.dispatch import leaf_handles, linear_path
from kernels_numba.kv_type import VALUES_PER_BLOCK, kv_type_of, kv_type_of_code, make_kv_layer


@dataclass(frozen=True)
class DecodeStack:
    num_tokens: int
    k_caches: tuple  # the caches the List holds (checked by identity: a new cache gets a new stack)
    v_caches: tuple
    block_tables_type: tuple  # _array_kind of the block tables the tasks kernels were looked up for
    layers: object  # numba typed List: each layer's decode_layer_into arguments but the step's own
    kernel: tuple  # decode_layer_into's (address, signature id) for those arguments

    def serves(self, num_tokens: int, k_caches, v_caches, block_tables_type) -> bool:
        return (self.num_tokens == num_tokens and block_tables_type == self.block_tables_type
                and len(k_caches) == len(self.k_caches) and len(v_caches) == len(self.v_caches)
                and all(map(operator.is_, k_caches, self.k_caches)) and all(map(operator.is_, v_caches, self.v_caches)))


def _layer_arguments(plan: DecodeLayerPlan, num_tokens: int, k_cache, v_cache, block_tables,
                     mixed_paths: bool | None) -> tuple:
    """decode_layer_into's arguments for one layer, in its order, less x, block_tables, positions and slots."""
    p = plan
    return (p.mats, p.kernels(num_tokens), p.norms, p.biases, p.inv_freq, p.is_neox, p.num_heads, p.num_kv_heads,
            p.head_dim, p.eps, p.activation, k_cache, v_cache, kv_type_of(k_cache), p.scale, p.sliding_window,
            p.softcap, p.tasks_kernel(k_cache, v_cache, block_tables), mixed_paths)


def _array_kind(array: np.ndarray) -> tuple:
    """What numba's type of an array depends on, read in ~1 us where numba.typeof takes several."""
    return array.dtype, array.ndim, array.flags.c_contiguous, array.flags.writeable


@njit(cache=True)
def _list_of(item):
    """A typed List holding item (made in compiled code, cached: numba's typed List methods called from Python
    compile afresh in every process)."""
    items = List()
    items.append(item)
    return items


@njit(cache=True)
def _append(items, item):
    items.append(item)


def _typed_list(arguments: tuple):
    """A typed List of the layers' arguments, one item at a time: a function taking the whole tuple of them (18-30
    nested tuples) took 16 s to compile (Gemma 3 270M), each of these a moment."""
    items = _list_of(arguments[0])
    for item in arguments[1:]:
        _append(items, item)
    return items


def decode_stack(plans: list, num_tokens: int, k_caches, v_caches, block_tables: np.ndarray) -> DecodeStack | None:
    """The stack for these plans, token count and caches: the one built for this token count if it serves (a serve
    batch's size changes from step to step), else a new one; None when the layers' arguments are not all of one
    type (such a model takes decode_layer a layer at a time)."""
    stacks = plans[0].stacks
    block_tables_type = _array_kind(block_tables)
    known = stacks.get(num_tokens)
    if known is not None and known.serves(num_tokens, k_caches, v_caches, block_tables_type):
        return known
    arguments, layer_types = _stack_arguments(plans, num_tokens, k_caches, v_caches, block_tables)
    if layer_types is None:
        return None
    layers = _typed_list(arguments)
    # the loop before the layer kernel: in a first run the chain gets here while the side child compiles
    # decode_layer_into (compile_decode_step), and compiles the loop meanwhile instead of waiting for both
    _compile_loop(layers, num_tokens, block_tables)
    kernel = native_kernel(decode_layer_into, layer_types)
    stack = DecodeStack(num_tokens, tuple(k_caches), tuple(v_caches), block_tables_type, layers, kernel)
    stacks[num_tokens] = stack
    return stack


def _stack_arguments(plans: list, num_tokens: int, k_caches, v_caches, block_tables: np.ndarray) -> tuple:
    """(each layer's decode_layer_into arguments, decode_layer_into's argument types for them: None where they
    differ in type from layer to layer)."""
    # one mixed_paths for the model (one type for every layer): None only where every layer's kernels take the
    # run path
    mixed_paths = None if all(plan.mixed_paths(num_tokens) is None for plan in plans) else True
    arguments = tuple(_layer_arguments(plan, num_tokens, k, v, block_tables, mixed_paths)
                      for plan, k, v in zip(plans, k_caches, v_caches))
    return arguments, _layer_kernel_types(arguments, block_tables)


def _layer_kernel_types(arguments: tuple, block_tables: np.ndarray) -> tuple | None:
    """decode_layer_into's argument types for the layers' arguments (all of one type, else None), as the stack
    compiles it: x, positions and slots as the step's C-contiguous arrays."""
    layer_types = {numba.typeof(layer) for layer in arguments}
    if len(layer_types) != 1:
        return None
    layer_type = layer_types.pop()
    x_type = numba.typeof(np.empty((1, 1), dtype=np.float32))
    positions_type = slots_type = numba.typeof(np.empty(0, dtype=np.int64))
    return (x_type, *layer_type.types[:14], numba.typeof(block_tables), positions_type, slots_type,
            *layer_type.types[14:])


def compile_decode_step(layer_mats: list[tuple[WeightTensor, ...]], kv_code: int, num_tokens: int = 1,
                        is_tail: bool = False) -> bool:
    """Compiles (or loads from numba's cache) what decode_layers compiles for a decode step of num_tokens tokens of
    a model whose layers have these (q, k, v, o, gate, up, down) weights over a KV cache of type kv_code, from
    their types alone, before any weight is repacked or read: the mat-vecs' leaves, the attention's tasks kernel,
    decode_layer_into, then the stack's typed List and loop. decode_layer_into's argument types hold no shape and
    no weight type, only the KV cache's array type and mixed_paths (read from the weights' types here).

    A first run's side child (pocketcli/commands/first_run.py) does this while the chain of children compiles the
    load's kernels and the prefill's, in the reverse of the chain's order, so that each finds in numba's cache
    what the other compiled; its tail child (is_tail) compiles the stack's List and loop and decode_layer_into's
    later calls (decode_layer.decode_layer_tail_into), which the side child then finds cached. False, with nothing
    compiled, where plan_decode_layer would make no plan."""
    layer_codes = [fused_codes(mats) for mats in layer_mats]
    if not layer_codes or any(codes is None for codes in layer_codes):
        return False
    mixed_paths = mixed_paths_of(linear_path(code, num_tokens) for codes in layer_codes for code in codes)
    if not is_tail:
        # the layers' leaves, in the reverse of the order a prefill meets them (the chain compiles them from the
        # other end), first: they call no KV row codec, which the chain is compiling meanwhile (kv_row.py)
        for code in reversed(dict.fromkeys(code for codes in layer_codes for code in codes)):
            leaf_handles(linear_path(code, num_tokens), code)
    register_row_codecs()  # where a side child deferred them: before the attention's kernels
    plan = type_plan(layer_codes[0])
    kv_cache = make_kv_layer(1, 1, 1, VALUES_PER_BLOCK, kv_type_of_code(kv_code))  # keys' and values' type
    block_tables = np.zeros((num_tokens, 1), dtype=np.int32)  # as model_runner and split_decodes give them
    arguments = _layer_arguments(plan, num_tokens, kv_cache, kv_cache, block_tables, mixed_paths)  # the tasks kernel
    layer_types = _layer_kernel_types((arguments,), block_tables)
    if is_tail:
        _compile_stack_loop(arguments, num_tokens, block_tables)
        decode_layer_tail_into.compile(layer_types)
        return True
    decode_layer_into.compile(layer_types)
    _compile_stack_loop(arguments, num_tokens, block_tables)
    return True


def _compile_stack_loop(arguments: tuple, num_tokens: int, block_tables: np.ndarray) -> None:
    """The stack's typed List (_list_of, _append) and loop for layers of these arguments."""
    _compile_loop(_typed_list((arguments, arguments)), num_tokens, block_tables)


def _compile_loop(layers, num_tokens: int, block_tables: np.ndarray) -> None:
    """decode_layers_into for this typed List of layers (compiled, or loaded from numba's cache), as
    decode_layers calls it."""
    x = np.zeros((num_tokens, 1), dtype=np.float32)
    positions = slots = np.zeros(num_tokens, dtype=np.int64)
    decode_layers_into.compile(tuple(numba.typeof(value) for value in (x, layers, block_tables, positions, slots))
                               + (numba.typeof(NO_KERNEL),))


@njit(cache=True, nogil=True)
def decode_layers_into(x, layers, block_tables, positions, slots, kernel):
    """decode_layer_into(x, ...) of each layer's arguments in turn (DecodeStack.layers), x updated in place."""
    for i in range(len(layers)):
        (mats, kernels, norms, biases, inv_freq, is_neox, num_heads, num_kv_heads, head_dim, eps, activation,
         k_cache, v_cache, kv_type, scale, sliding_window, softcap, tasks_kernel, mixed_paths) = layers[i]
        call_native(kernel, (x, mats, kernels, norms, biases, inv_freq, is_neox, num_heads, num_kv_heads, head_dim,
                             eps, activation, k_cache, v_cache, kv_type, block_tables, positions, slots, scale,
                             sliding_window, softcap, tasks_kernel, mixed_paths))


def decode_layers(x: np.ndarray, plans: list, k_caches, v_caches, block_tables: np.ndarray, positions: np.ndarray,
                  slots: np.ndarray) -> bool:
    """decode_layer.decode_layer of every layer in turn, in one call (same arguments, same bits); False, with
    nothing done, where the layers' arguments differ in type (the caller then goes a layer at a time)."""
    stack = decode_stack(plans, x.shape[0], k_caches, v_caches, block_tables)
    if stack is None:
        return False
    decode_layers_into(x, stack.layers, block_tables, positions, slots, stack.kernel)
    return True
