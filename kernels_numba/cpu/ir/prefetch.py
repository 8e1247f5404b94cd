"""Software prefetch of weight bytes (llvm.prefetch), so streaming matvecs keep more memory requests in flight."""
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

CACHE_LINE_BYTES = 64


@intrinsic
def prefetch_byte(typingctx, array, row, col):
    """Hint the CPU to load the cache line holding array[row, col] (2-D array; no bounds check, never faults)."""
    if not isinstance(array, types.Array) or array.ndim != 2:
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        ary = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer2(
            context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
            strides=cgutils.unpack_tuple(builder, ary.strides), layout=array_type.layout,
            inds=[args[1], args[2]], wraparound=False, boundscheck=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0i8")
        # read access, high temporal locality, data cache
        builder.call(prefetch, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, types.intp, types.intp), codegen


@njit(cache=True)
def prefetch_rows(data, first_row, stop_row):
    """Prefetch every cache line of rows first_row .. stop_row-1 of a 2-D uint8 array (clipped to its rows)."""
    for r in range(max(first_row, 0), min(stop_row, data.shape[0])):
        for offset in range(0, data.shape[1], CACHE_LINE_BYTES):
            prefetch_byte(data, r, offset)
