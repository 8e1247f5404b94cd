"""Decode attention's two inner loops over KV cache rows (f16 or f32) as vector IR: a head's scores against 8 keys at
a time, and a head's weighted sum of value rows.

In numba, the score loop ended each (head, key) in a horizontal sum of its own and the value loop loaded and stored
the head's accumulator once a key, with each f16 row decoded by a call beforehand: ~19 ns a (head, key) at
head_dim 64 (f32 rows ~12). Here a group of 8 keys keeps 8 independent FMA chains, converts f16 lanes as it loads
them (vcvtph2ps) and sums the 8 chains in one transposing tree; the value loop keeps 64 dims of the accumulator
in 8 registers across all the keys. Rows are located by index (attention._key_places): rows[row_ids[i]] of a cache
seen as [rows, row bytes or values]. Each (head, key)'s operations are the same whatever the batch, and the sums'
order is fixed, so a token gets the same bits alone or batched.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels_numba.cpu.ir.vector_ir import F32, I32, I64, broadcast_runs, fma, load_vector, row_pointer

LANES = 8  # floats in a vector (one ymm); head_dim must be a multiple
KEYS_A_GROUP = 8  # keys a score group holds in independent chains
SLAB_VECTORS = 8  # accumulator vectors the value loop keeps in registers (64 dims)
_FLOATS = ir.VectorType(F32, LANES)
_HALVES = ir.VectorType(ir.HalfType(), LANES)


def _is_rows(array_type) -> bool:
    return (isinstance(array_type, types.Array) and array_type.ndim == 2 and array_type.layout == "C"
            and array_type.dtype in (types.float32, types.uint8))


def _is_floats(array_type, ndim) -> bool:
    return isinstance(array_type, types.Array) and array_type.ndim == ndim and array_type.dtype == types.float32


def _row_start(context, builder, rows_type, rows, row_ids_type, row_ids, index):
    """A byte pointer to rows[row_ids[index]]."""
    ids = context.make_array(row_ids_type)(context, builder, row_ids)
    row_id = builder.load(builder.gep(builder.bitcast(ids.data, I64.as_pointer()), [index]))
    return row_pointer(context, builder, rows_type, rows, row_id)


def _load_lanes(builder, row, chunk, is_half):
    """Values 8 * chunk .. 8 * chunk + 7 of a row (byte pointer) as 8 floats."""
    if is_half:
        return builder.fpext(load_vector(builder, builder.gep(row, [builder.mul(chunk, I64(2 * LANES))]), _HALVES),
                             _FLOATS)
    return load_vector(builder, builder.gep(row, [builder.mul(chunk, I64(4 * LANES))]), _FLOATS)


def _float_row(context, builder, array_type, array, index):
    """A float pointer to row `index` of a 2-D float32 array whose rows are contiguous."""
    return builder.bitcast(row_pointer(context, builder, array_type, array, index), F32.as_pointer())


def _pair_sums(builder, a, b, mask_even, mask_odd):
    even = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, LANES), mask_even))
    odd = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, LANES), mask_odd))
    return builder.fadd(even, odd)


def _chain_totals(builder, chains):
    """8 vectors of 8 lanes -> one vector whose lane j is chain j's sum (the same tree for every chain)."""
    level = [_pair_sums(builder, a, b, [0, 2, 8, 10, 4, 6, 12, 14], [1, 3, 9, 11, 5, 7, 13, 15])
             for a, b in zip(chains[0::2], chains[1::2])]
    level = [_pair_sums(builder, a, b, [0, 2, 8, 10, 4, 6, 12, 14], [1, 3, 9, 11, 5, 7, 13, 15])
             for a, b in zip(level[0::2], level[1::2])]
    return _pair_sums(builder, level[0], level[1], [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])


@intrinsic
def key_scores_into(typingctx, queries, head, rows, row_ids, first, count, scale, scores):
    """scores[head, first + j] = scale * (queries[head] . rows[row_ids[first + j]]) for j < count <= 8: rows f32, or
    uint8 holding f16 values; head_dim (queries.shape[1]) a multiple of 8, rows at least that wide."""
    if not (_is_floats(queries, 2) and _is_rows(rows) and _is_floats(scores, 2)
            and isinstance(row_ids, types.Array) and row_ids.dtype == types.int64 and row_ids.layout == "C"):
        return None
    is_half = rows.dtype == types.uint8

    def codegen(context, builder, signature, args):
        queries_type, head_type, rows_type, ids_type, first_type, count_type, _, scores_type = signature.args
        queries_value, head_value, rows_value, ids_value, first_value, count_value, scale_value, scores_value = args
        head_index = context.cast(builder, head_value, head_type, types.int64)
        first_index = context.cast(builder, first_value, first_type, types.int64)
        count_value = context.cast(builder, count_value, count_type, types.int64)
        query = _float_row(context, builder, queries_type, queries_value, head_index)
        head_dim = builder.extract_value(context.make_array(queries_type)(context, builder, queries_value).shape, 1)
        last = builder.add(first_index, builder.sub(count_value, I64(1)))
        starts = []
        for j in range(KEYS_A_GROUP):  # keys past count repeat the last one (their sums are not stored)
            index = builder.add(first_index, I64(j))
            index = builder.select(builder.icmp_signed("<", index, last), index, last)
            starts.append(_row_start(context, builder, rows_type, rows_value, ids_type, ids_value, index))
        chains = [cgutils.alloca_once_value(builder, ir.Constant(_FLOATS, None)) for _ in range(KEYS_A_GROUP)]
        with cgutils.for_range(builder, builder.udiv(head_dim, I64(LANES))) as loop:
            q = load_vector(builder, builder.gep(query, [builder.mul(loop.index, I64(LANES))]), _FLOATS)
            for start, chain in zip(starts, chains):
                builder.store(fma(builder, q, _load_lanes(builder, start, loop.index, is_half), builder.load(chain)),
                              chain)
        totals = _chain_totals(builder, [builder.load(chain) for chain in chains])
        totals = builder.fmul(totals, broadcast_runs(builder, [scale_value], _FLOATS))
        out = builder.gep(_float_row(context, builder, scores_type, scores_value, head_index), [first_index])
        for j in range(KEYS_A_GROUP):
            with builder.if_then(builder.icmp_signed("<", I64(j), count_value)):
                builder.store(builder.extract_element(totals, I32(j)), builder.gep(out, [I64(j)]))
        return context.get_dummy_value()

    return types.void(queries, head, rows, row_ids, first, count, scale, scores), codegen


@intrinsic
def add_value_rows(typingctx, weights, head, rows, row_ids, first, count, acc):
    """acc[head] += sum over first <= j < first + count of weights[head, j] * rows[row_ids[j]], in key order for
    every dim: rows f32, or uint8 holding f16 values; head_dim (acc.shape[1]) a multiple of 8. 64 dims at a time
    stay in registers across the keys (a rest of fewer goes 8 dims at a time)."""
    if not (_is_floats(weights, 2) and _is_rows(rows) and _is_floats(acc, 2)
            and isinstance(row_ids, types.Array) and row_ids.dtype == types.int64 and row_ids.layout == "C"):
        return None
    is_half = rows.dtype == types.uint8

    def codegen(context, builder, signature, args):
        weights_type, head_type, rows_type, ids_type, first_type, count_type, acc_type = signature.args
        weights_value, head_value, rows_value, ids_value, first_value, count_value, acc_value = args
        head_index = context.cast(builder, head_value, head_type, types.int64)
        first_index = context.cast(builder, first_value, first_type, types.int64)
        count_value = context.cast(builder, count_value, count_type, types.int64)
        head_weights = _float_row(context, builder, weights_type, weights_value, head_index)
        head_acc = _float_row(context, builder, acc_type, acc_value, head_index)
        head_dim = builder.extract_value(context.make_array(acc_type)(context, builder, acc_value).shape, 1)
        num_chunks = builder.udiv(head_dim, I64(LANES))

        def slab(first_chunk, num_vectors):
            """Chunks first_chunk .. + num_vectors of acc, summed over every key in registers."""
            targets = [builder.gep(head_acc, [builder.mul(builder.add(first_chunk, I64(v)), I64(LANES))])
                       for v in range(num_vectors)]
            sums = [cgutils.alloca_once_value(builder, load_vector(builder, target, _FLOATS)) for target in targets]
            with cgutils.for_range(builder, count_value) as keys:
                key = builder.add(first_index, keys.index)
                start = _row_start(context, builder, rows_type, rows_value, ids_type, ids_value, key)
                weight = builder.load(builder.gep(head_weights, [key]))
                splat = broadcast_runs(builder, [weight], _FLOATS)
                for v, total in enumerate(sums):
                    values = _load_lanes(builder, start, builder.add(first_chunk, I64(v)), is_half)
                    builder.store(fma(builder, splat, values, builder.load(total)), total)
            for target, total in zip(targets, sums):
                builder.store(builder.load(total), builder.bitcast(target, _FLOATS.as_pointer()), align=4)

        full_slabs = builder.udiv(num_chunks, I64(SLAB_VECTORS))
        with cgutils.for_range(builder, full_slabs) as slabs:
            slab(builder.mul(slabs.index, I64(SLAB_VECTORS)), SLAB_VECTORS)
        with cgutils.for_range(builder, builder.sub(num_chunks, builder.mul(full_slabs, I64(SLAB_VECTORS)))) as rest:
            slab(builder.add(builder.mul(full_slabs, I64(SLAB_VECTORS)), rest.index), 1)
        return context.get_dummy_value()

    return types.void(weights, head, rows, row_ids, first, count, acc), codegen
