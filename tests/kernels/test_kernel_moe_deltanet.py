"""MoE and Gated DeltaNet kernels: numba CPU against the numpy reference, and the reference's own invariants."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

from gguf_loader.weight_tensor import make_weight_tensor
from kernels_numba import reference_deltanet as ref_dn
from kernels_numba import reference_moe as ref_moe
from tests.kernels.kernel_test_data import deltanet_inputs, relative_error

cpu = pytest.importorskip("kernels_numba.cpu", exc_type=ImportError)
from kernels_numba.cpu.matvec import quant_type  # noqa: E402  (after the importorskip)
from kernels_numba.cpu.matvec.int8_matvec import INT8_CODES  # noqa: E402
from kernels_numba.cpu.matvec.dispatch import USE_INT8_DOT  # noqa: E402
from kernels_numba.cpu.moe import MAX_FUSED_ROWS_PER_EXPERT  # noqa: E402
rng = np.random.default_rng(7)


def stacked_experts(num_experts=6, rows=16, cols=64, qtype=QT.Q8_0):
    w = rng.standard_normal((num_experts, rows, cols)).astype(np.float32)
    raw = quantize(w, qtype) if qtype != QT.F32 else w
    return make_weight_tensor("exps", qtype, w.shape, np.ascontiguousarray(raw).view(np.uint8))


@pytest.mark.parametrize("qtype", [QT.F32, QT.Q8_0, QT.Q4_0])
@pytest.mark.parametrize("num_rows", [1, 3, 20])
def test_moe_linear_matches_reference_and_reads_one_expert_per_row(qtype, num_rows):
    w = stacked_experts(cols=256, qtype=qtype)
    x = rng.standard_normal((num_rows, 256)).astype(np.float32)
    ids = rng.integers(0, 6, num_rows)
    expected = ref_moe.moe_linear(x, w, ids)
    if np.bincount(ids).max() > MAX_FUSED_ROWS_PER_EXPERT and USE_INT8_DOT and quant_type.TYPE_CODES[qtype] in INT8_CODES:
        # per-expert linear: 8-bit activations (int8_dot.py), ~0.5% from the exact product on random data
        assert relative_error(cpu.moe_linear(x, w, ids), expected) < 2e-2
    else:
        np.testing.assert_allclose(cpu.moe_linear(x, w, ids), expected, atol=2e-4, rtol=1e-4)
    for i, e in enumerate(ids):  # row i is expert e's product only
        np.testing.assert_allclose(expected[i], x[i] @ cpu.dequantize(ref_moe.expert_view(w, int(e))).T,
                                   atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("normalize", [True, False])
def test_moe_route_and_combine(normalize):
    logits = rng.standard_normal((5, 8)).astype(np.float32)
    logits[0, 3] = logits[0, 5]  # a tie: the lower expert id comes first
    ids, weights = ref_moe.moe_route(logits, 3, normalize)
    cpu_ids, cpu_weights = cpu.moe_route(logits, 3, normalize)
    np.testing.assert_array_equal(cpu_ids, ids)
    np.testing.assert_allclose(cpu_weights, weights, atol=1e-6)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    assert (ids[:, 0] == probs.argmax(1)).all()
    np.testing.assert_allclose(weights.sum(1), 1.0 if normalize else np.sort(probs, 1)[:, -3:].sum(1), atol=1e-6)
    expert_out = rng.standard_normal((15, 7)).astype(np.float32)
    np.testing.assert_allclose(cpu.moe_combine(expert_out, weights), ref_moe.moe_combine(expert_out, weights),
                               atol=1e-5)


@pytest.mark.parametrize("num_tokens, chunk_size", [(1, 64), (37, 16), (40, 8)])
def test_chunked_equals_recurrent(num_tokens, chunk_size):
    q, k, v, g, beta, state = deltanet_inputs(rng, num_tokens, heads=3)
    outputs, states = [], []
    for ops, chunked in ((ref_dn, False), (ref_dn, True), (cpu, False), (cpu, True)):
        s = state.copy()
        if chunked:
            outputs.append(ops.gated_delta_rule_chunked(q, k, v, g, beta, s, chunk_size))
        else:
            outputs.append(ops.gated_delta_rule_recurrent(q, k, v, g, beta, s))
        states.append(s)
    for o, s in zip(outputs[1:], states[1:]):
        np.testing.assert_allclose(o, outputs[0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(s, states[0], atol=1e-5, rtol=0)


def test_recurrent_step_is_the_delta_rule():
    q, k, v, g, beta, state = deltanet_inputs(rng, 1, heads=1)
    s = state[0].astype(np.float64) * np.exp(g[0, 0])
    s += np.outer(k[0, 0], beta[0, 0] * (v[0, 0] - s.T @ k[0, 0]))
    out = ref_dn.gated_delta_rule_recurrent(q, k, v, g, beta, state)
    np.testing.assert_allclose(state[0], s, atol=1e-6)
    np.testing.assert_allclose(out[0, 0], s.T @ q[0, 0], atol=1e-6)


def test_conv1d_state_carries_across_calls():
    x = rng.standard_normal((11, 10)).astype(np.float32)
    weight = rng.standard_normal((10, 4)).astype(np.float32)
    whole_state = np.zeros((3, 10), dtype=np.float32)
    whole = ref_dn.conv1d_silu(x, weight, whole_state)
    for ops in (ref_dn, cpu):
        state = np.zeros((3, 10), dtype=np.float32)
        parts = np.concatenate([ops.conv1d_silu(x[a:b], weight, state) for a, b in ((0, 1), (1, 6), (6, 7), (7, 11))])
        np.testing.assert_allclose(parts, whole, atol=1e-6)
        np.testing.assert_array_equal(state, x[-3:])
    first = x[0] * weight[:, 3]  # the first token only sees itself (weight column K-1)
    np.testing.assert_allclose(whole[0], first / (1 + np.exp(-first)), atol=1e-6)
