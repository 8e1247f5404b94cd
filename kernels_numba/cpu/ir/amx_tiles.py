"""Intel AMX tile state for numba kernels: whether the CPU and OS allow it, and the tile configuration.

AMX multiplies a tile of up to 16 rows x 64 signed bytes (A) by one of 16 rows x 16 x 4 bytes in VNNI order (B)
into 16 x 16 int32 sums (C) in one instruction: ~1000 byte products a cycle where a 512-bit vpdpbusd gives 64.
With 8-bit activations that turns the weight-row dots of a batch of tokens from compute-bound into
memory-bound. Linux hands out the tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, kernel >= 5.16),
so AMX_IS_AVAILABLE needs both the CPU feature (as numba's target machine sees it) and that permission.
LLVM cannot select the tile instructions for a CPU without them, and numba compiles every function a kernel
names, taken branch or not: on such a CPU the intrinsics here and in amx_dot emit nothing (amx_call), and
amx_matvec never runs them (uses_amx is False there).

Tile registers (amx_dot.py), two sets so that two blocks are in flight: C (rows x 4 * tokens bytes of int32),
A (rows x block bytes of weights), B (block bytes / 4 rows x 4 * tokens bytes: each token's 4 consecutive
activation bytes side by side).
"""
from __future__ import annotations

import ctypes
import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.registry import cpu_target
from numba.extending import intrinsic

_I8, _I16, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(64)
_BYTE_POINTER = _I8.as_pointer()
_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
TILE_SETS = ((0, 1, 2), (3, 4, 5))  # (C, A, B) tile registers: two blocks in flight


def _request_tile_state() -> bool:
    """Ask Linux for the AMX tile data state for this process (all its threads); False where refused."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def _host_has_amx_int8() -> bool:
    features = cpu_target.target_context.codegen()._tm_features.split(",")
    return "+amx-int8" in features and "+amx-tile" in features


HOST_COMPILES_AMX = _host_has_amx_int8()
AMX_IS_AVAILABLE = HOST_COMPILES_AMX and _request_tile_state()


def amx_call(builder, name, argument_types, arguments):
    """Call the void LLVM intrinsic `name` where the host CPU has AMX; emit nothing where it has not (the code
    is then unreachable, and LLVM would refuse to compile the instruction)."""
    if HOST_COMPILES_AMX:
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), argument_types),
                                                  name)
        builder.call(function, arguments)


@intrinsic
def configure_tiles(typingctx, num_rows, block_bytes, num_tokens):
    """Load the tile configuration for C = A (num_rows x block_bytes) . B (block_bytes / 4 x 4 * num_tokens)."""
    def codegen(context, builder, signature, args):
        num_rows, block_bytes, num_tokens = (builder.trunc(value, _I16) for value in args)
        config_type = ir.ArrayType(_I8, 64)
        config = cgutils.alloca_once(builder, config_type)
        builder.store(ir.Constant(config_type, [0] * 64), config)
        start = builder.bitcast(config, _BYTE_POINTER)
        builder.store(_I8(1), start)  # palette 1
        column_bytes = builder.bitcast(builder.gep(start, [_I64(16)]), _I16.as_pointer())
        rows = builder.gep(start, [_I64(48)])
        token_bytes = builder.mul(num_tokens, _I16(4))
        shapes = {}
        for c_tile, a_tile, b_tile in TILE_SETS:
            shapes.update({c_tile: (num_rows, token_bytes), a_tile: (num_rows, block_bytes),
                           b_tile: (builder.udiv(block_bytes, _I16(4)), token_bytes)})
        for tile, (tile_rows, tile_bytes) in shapes.items():
            builder.store(tile_bytes, builder.gep(column_bytes, [_I64(tile)]))
            builder.store(builder.trunc(tile_rows, _I8), builder.gep(rows, [_I64(tile)]))
        amx_call(builder, "llvm.x86.ldtilecfg", [_BYTE_POINTER], [start])
        return context.get_dummy_value()

    return types.void(num_rows, block_bytes, num_tokens), codegen


@intrinsic
def release_tiles(typingctx):
    def codegen(context, builder, signature, args):
        amx_call(builder, "llvm.x86.tilerelease", [], [])
        return context.get_dummy_value()

    return types.void(), codegen
