"""KV cache types (kernels_numba/kv_type.py): the CPU's rows against the numpy oracle's, bit for bit, and paged
attention over caches of every type against the oracle reading the same bytes."""
import numpy as np
import pytest

from kernels_numba import get_ops
from kernels_numba.cpu import attention, prefill_attention
from kernels_numba.cpu.kv_row import decode_kv_row, decoded_row_into, encode_kv_row
from kernels_numba.kv_type import F32, KV_TYPES, make_kv_layer
from kernels_numba.reference_kv import (dequantize_kv_rows, e4m3_codes, hadamard_blocks, q4_0_outlier_positions,
                                       quantize_kv_rows)
from gguf_loader.fp8_layout import E4M3_TABLE
from tests.kernels.test_kernel_attention import make_paged_batch

cpu, reference = get_ops("cpu"), get_ops("reference")
STORED_TYPES = [name for name, t in KV_TYPES.items() if t.code != F32]
# worst |decoded - value| / max |value| of a row: the rounding each type allows
ROW_ERROR = {"f32": 0.0, "f16": 5e-4, "bf16": 4e-3, "q8_0": 4e-3 + 1 / 254, "fp8": 0.07}


def awkward_rows(rng, width=64):
    """Rows of scales 0.01 to 1000 (f16 scales lose precision below), plus an all-zero row, negative zeros, a lone spike and exact ties."""
    rows = rng.standard_normal((12, width)).astype(np.float32) * np.float32(10.0) ** rng.integers(-2, 4, (12, 1))
    rows[0] = 0.0
    rows[1, :40] = -0.0
    rows[2] = 0.0
    rows[2, 5] = -3.0
    rows[3] = np.tile(np.float32([0.5, -0.5, 1.5, -2.5]), width // 4)
    return rows.astype(np.float32)


@pytest.mark.parametrize("width", [64, 256])  # a q4_0 row of 256 keeps 3 outliers apart, of 64 none
@pytest.mark.parametrize("name", STORED_TYPES)
def test_cpu_rows_are_the_oracles_bytes_and_decode_alike(name, width):
    code, rows = KV_TYPES[name].code, awkward_rows(np.random.default_rng(1), width)
    expected = quantize_kv_rows(rows, code)
    got, decoded, read = np.empty_like(expected), np.empty_like(rows), np.empty_like(rows)
    for r in range(len(rows)):
        encode_kv_row(rows[r], code, got[r])
        decode_kv_row(got[r], code, decoded[r])
        decoded_row_into(got[r], code, read[r])  # what the attention kernels read: f16 and q8_0 in place
    assert np.array_equal(got, expected)
    assert np.array_equal(decoded, dequantize_kv_rows(expected, code))
    assert np.array_equal(read, decoded, equal_nan=True)
    if name == "q4_0":  # rounded in the Hadamard domain: bounded there, and the transform keeps L2 norms
        at = q4_0_outlier_positions(rows)
        kept = np.take_along_axis(rows, at, axis=1)
        assert np.array_equal(np.take_along_axis(decoded, at, axis=1), kept.astype(np.float16).astype(np.float32))
        rotated = hadamard_blocks(rows.reshape(-1, 32))
        error = np.linalg.norm((decoded - rows).reshape(-1, 32), axis=1)
        assert (error <= np.sqrt(32) * np.abs(rotated).max(axis=1) / 8 * 1.001 + 1e-6).all()
        return
    scale = np.abs(rows).max(axis=1, keepdims=True)
    assert (np.abs(decoded - rows) <= ROW_ERROR[name] * scale).all()


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_half_rows_of_any_width_decode_as_the_oracle(name):  # the f16 decoder converts 16 at a time, then a tail
    code, rows = KV_TYPES[name].code, awkward_rows(np.random.default_rng(2), width=64)[:, :41]
    expected = quantize_kv_rows(rows, code)
    decoded, read = np.empty_like(rows), np.empty_like(rows)
    for r in range(len(rows)):
        decode_kv_row(expected[r], code, decoded[r])
        decoded_row_into(expected[r], code, read[r])
    assert np.array_equal(decoded, dequantize_kv_rows(expected, code))
    assert np.array_equal(read, decoded)


def test_q4_0_outliers_and_scale_search_beat_llamacpps_rounding():
    """Rows with a few large channels (as Gemma 3's keys): outliers kept apart and the least-squares scale lose
    far less than plain peak / -8 blocks of the same transforms."""
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((64, 256)).astype(np.float32)
    rows[:, [7, 100, 254]] += np.float32([30.0, -20.0, 60.0])
    plain = hadamard_blocks(rows.reshape(-1, 32))
    at = np.abs(plain).argmax(axis=1)[:, None]
    d = (np.take_along_axis(plain, at, axis=1) / -8).astype(np.float16).astype(np.float32)
    plain = hadamard_blocks(np.clip(np.floor(plain / d + 8.5), 0, 15).astype(np.float32) - 8) * d
    ours = dequantize_kv_rows(quantize_kv_rows(rows, KV_TYPES["q4_0"].code), KV_TYPES["q4_0"].code)
    assert np.linalg.norm(ours - rows) < 0.5 * np.linalg.norm(plain.reshape(rows.shape) - rows)


def test_hadamard_blocks_are_orthonormal_and_their_own_inverse():
    x = np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)
    np.testing.assert_allclose(hadamard_blocks(hadamard_blocks(x)), x, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(hadamard_blocks(x), axis=1), np.linalg.norm(x, axis=1), rtol=1e-6)
    assert np.allclose(hadamard_blocks(np.eye(32, dtype=np.float32)[:1]), 1 / np.sqrt(32))


def test_e4m3_codes_are_the_nearest_values():
    values = np.linspace(-448, 448, 20001, dtype=np.float32) / np.float32(64.0) ** np.arange(3)[:, None]
    decoded = E4M3_TABLE[e4m3_codes(values)]
    finite = E4M3_TABLE[np.isfinite(E4M3_TABLE)]
    nearest = np.abs(values[..., None] - finite).min(axis=-1)
    assert np.array_equal(np.abs(decoded - values), nearest)


def test_bytes_per_token_of_each_type_against_f32():
    ratios = {name: t.row_bytes(256) / KV_TYPES["f32"].row_bytes(256) for name, t in KV_TYPES.items()}
    assert ratios["f16"] == ratios["bf16"] == 0.5
    assert ratios["q8_0"] <= 0.27 and ratios["fp8"] <= 0.27 and ratios["q4_0"] <= 0.15


@pytest.mark.parametrize("name", list(KV_TYPES))
def test_cpu_store_kv_writes_the_oracles_bytes(name):
    rng = np.random.default_rng(2)
    k, v = rng.standard_normal((2, 5, 2, 128)).astype(np.float32)  # 128: a q4_0 row keeps an outlier apart
    slots = np.array([9, 0, -1, 4, 15])
    caches = {backend: [make_kv_layer(4, 4, 2, 128, KV_TYPES[name]) for _ in range(2)] for backend in ("cpu", "ref")}
    cpu.store_kv(k, v, *caches["cpu"], slots)
    reference.store_kv(k, v, *caches["ref"], slots)
    for got, expected in zip(caches["cpu"], caches["ref"]):
        assert np.array_equal(np.asarray(got), np.asarray(expected))


@pytest.fixture
def tiny_tiles(monkeypatch):
    monkeypatch.setattr(prefill_attention, "QUERY_BLOCK_TOKENS", 3)
    monkeypatch.setattr(prefill_attention, "KEY_CHUNK_TOKENS", 4)
    monkeypatch.setattr(attention, "MIN_BLOCKED_QUERIES", 4)


@pytest.mark.parametrize("name", list(KV_TYPES))
def test_paged_attention_of_every_kv_type_matches_the_oracle(name, tiny_tiles, threading_mode):
    """A prompt (the tiled path), a prompt chunk, two decodes and an idle sequence, over shuffled blocks."""
    rng = np.random.default_rng(3)
    batch = make_paged_batch(rng, context_lens=[11, 17, 9, 6, 3], query_lens=[11, 7, 1, 2, 0], head_dim=128,
                             block_size=2, kv_type=name)
    args = (*batch, 0.2, 0, 0.0)
    np.testing.assert_allclose(cpu.paged_attention(*args), reference.paged_attention(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["q8_0", "q4_0"])
def test_quantized_attention_stays_near_float_attention(name):
    """Attention read from a quantized cache differs from the float32 cache's by about the rows' rounding."""
    batch = make_paged_batch(np.random.default_rng(4), context_lens=[40], query_lens=[1], head_dim=64)
    exact = reference.paged_attention(*batch, 0.125)
    quantized = make_paged_batch(np.random.default_rng(4), context_lens=[40], query_lens=[1], head_dim=64,
                                 kv_type=name)
    error = np.abs(cpu.paged_attention(*quantized, 0.125) - exact).max()
    assert error < {"q8_0": 0.02, "q4_0": 0.2}[name]


def test_row_codecs_are_one_external_function_each():
    """Kernels reach the KV row codecs by symbol (compiled once), not each with its own inlined copy."""
    import llvmlite.binding as llvm

    import kernels_numba.cpu  # noqa: F401  (registers the codecs)
    from kernels_numba.cpu import kv_row

    decode, encode = kv_row.row_codecs()
    assert llvm.address_of_symbol(kv_row.DECODE_SYMBOL) == decode.address
    assert llvm.address_of_symbol(kv_row.ENCODE_SYMBOL) == encode.address


DEFERRED_CODECS = """
import llvmlite.binding as llvm
import kernels_numba.cpu
from kernels_numba.cpu import kv_row
assert not llvm.address_of_symbol(kv_row.DECODE_SYMBOL) and kv_row.row_codecs.cache_info().currsize == 0
kv_row.register_row_codecs()
kv_row.register_row_codecs()  # once: the second does nothing
decode, encode = kv_row.row_codecs()
assert llvm.address_of_symbol(kv_row.DECODE_SYMBOL) == decode.address
assert llvm.address_of_symbol(kv_row.ENCODE_SYMBOL) == encode.address
print("deferred")
"""


def test_a_side_child_can_defer_the_row_codecs_until_it_registers_them():
    """A first run's side child imports the kernels without compiling the KV row codecs (the chain compiles them
    meanwhile): they are compiled or loaded only when registered."""
    import os
    import subprocess
    import sys

    from kernels_numba.kv_type import DEFER_ROW_CODECS_ENV

    env = {**os.environ, DEFER_ROW_CODECS_ENV: "1"}
    done = subprocess.run([sys.executable, "-c", DEFERRED_CODECS], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "deferred", done.stderr[-3000:]
