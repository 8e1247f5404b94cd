"""The integer core of the 8-bit dots, as IR: int32 lanes += sums of 4 products of unsigned weight bytes and
signed activation bytes (what one vpdpbusd does), in the instructions the CPU numba compiles for has.

| kind     | CPUs (tiers)                                | instructions per 32 byte products               |
|----------|---------------------------------------------|-------------------------------------------------|
| vnni512  | AVX512-VNNI (tiers avx512, amx)             | 1/2 vpdpbusd zmm                                |
| avxvnni  | AVX-VNNI without AVX-512 (Alder Lake ...)   | 1 vpdpbusd ymm (VEX)                            |
| avx2     | AVX2 (tier avx2: Haswell, Zen 1-3)          | vpmaddubsw + vpmaddwd + vpaddd, as llama.cpp's  |
| portable | anything else (tier generic, ARM64)         | widening multiplies LLVM picks for the target  |

Every kind gives the same integers (exact sums), so a kernel's results do not depend on the kind.

vpmaddubsw sums pairs of u8 x s8 products into int16 with saturation. The activation quants lie in -127..127
(int8_dot.quantize_activations_into), so weights up to 128 cannot saturate (2 x 128 x 127 < 32767): every type
but Q8_0, whose weights are stored as w + 128 (0..255). For those (zero point 128) the avx2 kind multiplies the
signed weights |w| by x with w's sign (vpsignb), llama.cpp's way, which is the dot without the zero point: the
kernel must then not start its lanes from -128 * the x sums (`ByteDot.uses_starts`).

The x86 intrinsics are only ever emitted for a target that has them: the kind is read off numba's target machine
(so a forced tier, NUMBA_CPU_NAME/NUMBA_CPU_FEATURES, is honoured), and the portable kind has no x86 IR at all.

A dot over several slices of weights under 128 (`ByteDot.sum_slices`: a run of 32 values is 8 slices) need not pay a
vpmaddwd per slice on AVX2: the vpmaddubsw words of up to 32767 // (2 * 127 * the largest weight) slices (4-bit
weights: all 8; 5-bit: 4; 6-bit: 2) add in int16 without overflow, then one vpmaddwd widens them, the same integers
with half the multiplies (the AVX2 dots' bottleneck; vpdpbusd needs no such trick).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir
from numba.core import cgutils
from numba.core.registry import cpu_target

VNNI512, AVXVNNI, AVX2, PORTABLE = "vnni512", "avxvnni", "avx2", "portable"
KINDS = (VNNI512, AVXVNNI, AVX2, PORTABLE)
LANE_BYTES = 4  # byte products summed into one int32 lane
SIGNED_ZERO_POINT = 128  # weights stored as w + 128: the avx2 kind multiplies w itself
MAX_X_QUANT = 127  # the largest |activation quant| (int8_dot.quantize_activations_into)
MAX_WORD = 32767  # int16

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_YMM_LANES = 8  # int32 lanes of a 256-bit register


def target_features(context) -> frozenset[str]:
    """The features numba's target machine compiles for (LLVM names), without the +/- signs of the off ones."""
    return frozenset(feature[1:] for feature in context.codegen()._tm_features.split(",")
                     if feature.startswith("+"))


# what each kind's instructions need (LLVM feature names; any one of the sets), best kind first. The avxvnni
# kind's 256-bit vpdpbusd is also an AVX512-VNNI instruction (EVEX-encoded where the target has AVX512-VL)
KIND_FEATURES = {VNNI512: (frozenset({"avx512vnni", "avx512bw", "avx512f", "avx512vl"}),),
                 AVXVNNI: (frozenset({"avxvnni", "avx2"}), frozenset({"avx512vnni", "avx512vl"})),
                 AVX2: (frozenset({"avx2", "ssse3"}),), PORTABLE: (frozenset(),)}


def kinds_for_features(features: frozenset[str]) -> tuple[str, ...]:
    """The kinds code compiled with these features can use (and a CPU with them can run), best first."""
    return tuple(kind for kind in KINDS if any(needed <= features for needed in KIND_FEATURES[kind]))


def kind_for_features(features: frozenset[str]) -> str:
    """The best byte-dot kind code compiled with these features can use."""
    return kinds_for_features(features)[0]


def target_kind(context=None) -> str:
    return kind_for_features(target_features(context or cpu_target.target_context))


def _call(builder, name, result_type, args):
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(result_type, [a.type for a in args]),
                                              name)
    return builder.call(function, args)


def _halves(builder, vector, parts):
    """vector split into `parts` equal consecutive pieces."""
    count = vector.type.count // parts
    return [builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(_I32, count),
                                                               list(range(p * count, (p + 1) * count))))
            for p in range(parts)]


def _joined(builder, pieces):
    while len(pieces) > 1:
        count = 2 * pieces[0].type.count
        pieces = [builder.shuffle_vector(pieces[i], pieces[i + 1], ir.Constant(ir.VectorType(_I32, count),
                                                                                list(range(count))))
                  for i in range(0, len(pieces), 2)]
    return pieces[0]


def _in_registers(builder, acc, unsigned_bytes, signed_bytes, register_lanes, dot_register):
    """dot_register over pieces of at most register_lanes lanes (a 512-bit vector on a 256-bit machine: two)."""
    parts = max(1, acc.type.count // register_lanes)
    if parts == 1:
        return dot_register(builder, acc, unsigned_bytes, signed_bytes)
    pieces = zip(_halves(builder, acc, parts), _halves(builder, unsigned_bytes, parts),
                 _halves(builder, signed_bytes, parts))
    return _joined(builder, [dot_register(builder, *piece) for piece in pieces])


def _vpdpbusd(builder, acc, unsigned_bytes, signed_bytes):
    name = {16: "llvm.x86.avx512.vpdpbusd.512", 8: "llvm.x86.avx512.vpdpbusd.256",
            4: "llvm.x86.avx512.vpdpbusd.128"}[acc.type.count]  # VEX-encoded for AVX-VNNI targets
    return _call(builder, name, acc.type, [acc, builder.bitcast(unsigned_bytes, acc.type),
                                           builder.bitcast(signed_bytes, acc.type)])


def _pair_sums(builder, unsigned_bytes, signed_bytes):
    """vpmaddubsw then vpmaddwd with ones: the int32 sums of 4 byte products (no saturation: see the docstring)."""
    return _word_sums(builder, _pair_words(builder, unsigned_bytes, signed_bytes))


def _pair_words(builder, unsigned_bytes, signed_bytes):
    """vpmaddubsw: int16 sums of byte product pairs (saturating; see the docstring)."""
    num_lanes = unsigned_bytes.type.count // LANE_BYTES
    words_type = ir.VectorType(_I16, 2 * num_lanes)
    bytes_type = unsigned_bytes.type
    name = "llvm.x86.avx2.pmadd.ub.sw" if num_lanes == _YMM_LANES else "llvm.x86.ssse3.pmadd.ub.sw.128"
    return _call(builder, name, words_type, [builder.bitcast(unsigned_bytes, bytes_type),
                                             builder.bitcast(signed_bytes, bytes_type)])


def _word_sums(builder, words):
    """vpmaddwd with ones: int32 lane i = word 2i + word 2i + 1."""
    num_lanes = words.type.count // 2
    ones = ir.Constant(words.type, [1] * words.type.count)
    return _call(builder, "llvm.x86.avx2.pmadd.wd" if num_lanes == _YMM_LANES else "llvm.x86.sse2.pmadd.wd",
                 ir.VectorType(_I32, num_lanes), [words, ones])


def _slices_per_word_sum(max_weight):
    """How many slices' vpmaddubsw pair sums (each at most 2 * max_weight * 127 in size) add up in int16 words
    without overflow: 8 for 4-bit weights, 4 for 5-bit, 2 for 6-bit, 1 (no gain) for bytes."""
    return MAX_WORD // (2 * max_weight * MAX_X_QUANT)


def _maddubs_slices(builder, acc, pairs, max_weight):
    """acc + the lane dots of every (unsigned, signed) slice pair (one register each), the vpmaddubsw words of up to
    _slices_per_word_sum(max_weight) slices added in int16 before one vpmaddwd: exact (no word can overflow or
    saturate), and half the multiplies of a vpmaddwd per slice (the AVX2 dots' bottleneck)."""
    parts = acc.type.count // _YMM_LANES
    if parts > 1:  # wider than a register: piece by piece
        split = [(_halves(builder, u, parts), _halves(builder, s, parts)) for u, s in pairs]
        return _joined(builder, [_maddubs_slices(builder, acc_part, [(u[p], s[p]) for u, s in split], max_weight)
                                 for p, acc_part in enumerate(_halves(builder, acc, parts))])
    per_sum = max(1, _slices_per_word_sum(max_weight))
    for first in range(0, len(pairs), per_sum):
        words = None
        for unsigned_bytes, signed_bytes in pairs[first:first + per_sum]:
            pair_words = _pair_words(builder, unsigned_bytes, signed_bytes)
            words = pair_words if words is None else builder.add(words, pair_words)
        acc = builder.add(acc, _word_sums(builder, words))
    return acc


def _maddubs(builder, acc, unsigned_bytes, signed_bytes):
    bytes_type = unsigned_bytes.type
    return builder.add(acc, _pair_sums(builder, builder.bitcast(unsigned_bytes, bytes_type),
                                       builder.bitcast(signed_bytes, bytes_type)))


def _maddubs_signed_weights(builder, acc, unsigned_bytes, signed_bytes):
    """acc + the dots of (unsigned - 128) and x: |w| times x with w's sign, as llama.cpp's AVX2 Q8_0 dot."""
    bytes_type = unsigned_bytes.type
    weights = builder.xor(unsigned_bytes, ir.Constant(bytes_type, [0x80] * bytes_type.count))
    magnitudes = _call(builder, f"llvm.abs.v{bytes_type.count}i8", bytes_type, [weights, ir.Constant(ir.IntType(1),
                                                                                                  0)])
    sign_name = "llvm.x86.avx2.psign.b" if bytes_type.count == 32 else "llvm.x86.ssse3.psign.b.128"
    signed_x = _call(builder, sign_name, bytes_type, [signed_bytes, weights])
    return builder.add(acc, _pair_sums(builder, magnitudes, signed_x))


def _portable(builder, acc, unsigned_bytes, signed_bytes):
    """vpdpbusd in plain IR: lane i += sum of u[4i+j] * s[4i+j], j < 4 (any CPU; LLVM picks the instructions)."""
    num_lanes = acc.type.count
    wide = ir.VectorType(_I32, LANE_BYTES * num_lanes)
    products = builder.mul(builder.zext(unsigned_bytes, wide), builder.sext(signed_bytes, wide))
    for j in range(LANE_BYTES):
        pick = ir.Constant(ir.VectorType(_I32, num_lanes), [LANE_BYTES * i + j for i in range(num_lanes)])
        acc = builder.add(acc, builder.shuffle_vector(products, ir.Constant(wide, ir.Undefined), pick))
    return acc


@dataclass(frozen=True)
class ByteDot:
    """One kind's lane dot for weights with one zero point."""
    kind: str
    add: Callable  # (builder, acc <n x i32>, unsigned <4n x i8>, signed <4n x i8>) -> acc + the lanes' dots
    uses_starts: bool  # whether the lanes must start from -zero_point * the x sums (false: the dot subtracts it)
    # (builder, acc, [(unsigned, signed) slices], the weights' largest value) -> acc + every slice pair's lane
    # dots, the same integers as `add` over the pairs; None: `add` one pair at a time
    add_slices: Callable | None = None

    def sum_slices(self, builder, acc, pairs, max_weight):
        """acc + the lane dots of every (unsigned, signed) slice pair (exact integers, whatever the kind)."""
        if self.add_slices is not None:
            return self.add_slices(builder, acc, pairs, max_weight)
        chains = [acc, ir.Constant(acc.type, None)]  # two dependency chains (latency)
        for j, (unsigned_bytes, signed_bytes) in enumerate(pairs):
            chains[j % 2] = self.add(builder, chains[j % 2], unsigned_bytes, signed_bytes)
        return builder.add(chains[0], chains[1])


def byte_dot(kind: str, zero_point: int) -> ByteDot:
    """The lane dot of `kind` for weights stored with `zero_point` added."""
    has_start = zero_point != 0
    if kind == VNNI512:
        return ByteDot(kind, _vpdpbusd, has_start)
    if kind == AVXVNNI:
        return ByteDot(kind, lambda builder, *args: _in_registers(builder, *args, _YMM_LANES, _vpdpbusd), has_start)
    if kind == AVX2:
        if zero_point == SIGNED_ZERO_POINT:
            return ByteDot(kind, lambda builder, *args: _in_registers(builder, *args, _YMM_LANES,
                                                                      _maddubs_signed_weights), False)
        return ByteDot(kind, lambda builder, *args: _in_registers(builder, *args, _YMM_LANES, _maddubs), has_start,
                       _maddubs_slices)
    if kind == PORTABLE:
        return ByteDot(kind, _portable, has_start)
    raise ValueError(f"unknown byte dot kind {kind!r}; one of {', '.join(KINDS)}")


def best_byte_dot(context, zero_point: int) -> ByteDot:
    """The fastest lane dot the target compiles for."""
    return byte_dot(target_kind(context), zero_point)


TARGET_KINDS = kinds_for_features(target_features(cpu_target.target_context))  # what this process can run
TARGET_KIND = TARGET_KINDS[0]
HAS_FAST_BYTE_DOT = TARGET_KIND != PORTABLE  # integer dot instructions: the 8-bit dots beat the float kernels
