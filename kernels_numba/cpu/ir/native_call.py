"""Calls from compiled code into another compiled kernel through its address, passed as an argument.

numba links every kernel a function calls into that function's LLVM module and optimises the whole module again,
callees included: a heavy kernel (the 8-bit dot intrinsics) was re-optimised by every function above it, and a
kernel that branches on a runtime quant type compiled every type's code each time. That made a fresh install's
first run take minutes. A leaf kernel compiled once for one quant type (a closure constant, or a literal argument
of an intrinsic that emits one type's IR) by `native_kernel`, and called through its address (`call_native`), is
optimised once and only for the types a model has; the glue above it stays small and is compiled once for all.

A kernel handle is (address, signature id), kept as a row of an int64 [kernels, 2] array where glue takes several
(a parallel loop's body cannot take tuples; `handle_at` reads one back). The id, a digest of the unliteral
argument types, is checked at run time against the call site's argument types, so a handle compiled for other
argument types raises TypeError instead of reading its arguments wrongly. (0, 0), NO_KERNEL, fills unused slots
and raises the same way.
"""
from __future__ import annotations

import zlib

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

NO_KERNEL = (0, 0)


def signature_id(arg_types) -> int:
    """A stable digest of the argument types as the callee sees them (literal values do not count: a leaf compiled
    for literal code 17 takes any int64 in that slot, its ABI is the same)."""
    names = repr(tuple(str(types.unliteral(arg_type)) for arg_type in arg_types))
    return zlib.crc32(names.encode()) or 1  # never 0: NO_KERNEL's id


def handles_array(handles) -> np.ndarray:
    """int64 [len(handles), 2] of kernel handles, what glue kernels take."""
    return np.array(handles, dtype=np.int64).reshape(len(handles), 2)


@njit(cache=True, inline="always")
def handle_at(handles, index):
    """Row `index` of a handles array as the (address, signature id) tuple call_native takes."""
    return handles[index, 0], handles[index, 1]


def native_kernel(dispatcher, arg_types) -> tuple[int, int]:
    """(address, signature id) of `dispatcher` compiled (or loaded from numba's cache) for arg_types, literal
    types included; the kernel must return nothing."""
    arg_types = tuple(arg_types)
    dispatcher.compile(arg_types)
    result = dispatcher.overloads[arg_types]
    if result.signature.return_type != types.none:
        raise TypeError(f"{dispatcher.py_func.__qualname__} returns {result.signature.return_type}, not None")
    address = result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
    return address, signature_id(arg_types)


@intrinsic
def call_native(typingctx, kernel, args):
    """kernel(*args) for a kernel handle of native_kernel; args: a tuple of the kernel's arguments."""
    if not (isinstance(kernel, types.UniTuple) and kernel.count == 2 and isinstance(kernel.dtype, types.Integer)
            and isinstance(args, types.BaseTuple)):
        return None
    arg_types = tuple(args.types)
    expected_id = signature_id(arg_types)

    def codegen(context, builder, signature, llargs):
        handle, values = llargs
        address, kernel_id = builder.extract_value(handle, 0), builder.extract_value(handle, 1)
        is_other = builder.icmp_unsigned("!=", kernel_id, ir.Constant(kernel_id.type, expected_id))
        with builder.if_then(is_other, likely=False):
            context.call_conv.return_user_exc(builder, TypeError,
                                              ("native kernel handle compiled for other argument types",))
        function_type = context.call_conv.get_function_type(types.none, arg_types)
        function = builder.inttoptr(address, function_type.as_pointer())
        arguments = [builder.extract_value(values, i) for i in range(len(arg_types))]
        status, _ = context.call_conv.call_function(builder, function, types.none, arg_types, arguments)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return types.none(kernel, args), codegen
