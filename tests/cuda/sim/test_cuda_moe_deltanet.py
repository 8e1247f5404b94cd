"""MoE and Gated DeltaNet CUDA ops against the numpy references on tiny shapes (simulator or a real GPU)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from gguf_loader.weight_tensor import make_weight_tensor
from kernels_numba import get_ops
from kernels_numba import reference_deltanet as ref_dn
from kernels_numba import reference_moe as ref_moe
from tests.kernels.kernel_test_data import (ALL_TYPES, deltanet_inputs, random_row_bytes,
                                           relative_error)

cuda_ops = get_ops("cuda")
host = cuda_ops.to_host


def stacked_experts(ggml_type, rng, num_experts=4, rows=5, cols=256):
    raw = random_row_bytes(ggml_type, num_experts * rows, cols, rng)
    raw.flags.writeable = False
    return make_weight_tensor("exps", ggml_type, (num_experts, rows, cols), raw)


@pytest.mark.parametrize("ggml_type", ALL_TYPES, ids=lambda t: t.name)
def test_moe_linear_every_quant_type(ggml_type):
    rng = np.random.default_rng(int(ggml_type))
    w = stacked_experts(ggml_type, rng)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    ids = np.array([2, 0, 2])
    assert relative_error(host(cuda_ops.moe_linear(x, w, ids)), ref_moe.moe_linear(x, w, ids)) < 1e-5


def test_moe_linear_more_rows_than_a_tile_with_device_ids():
    rng = np.random.default_rng(1)
    w = stacked_experts(QT.Q8_0, rng, num_experts=3, rows=40, cols=64)  # 40 rows: two warp tiles
    x = rng.standard_normal((2, 64)).astype(np.float32)
    ids = np.array([[1], [2]])
    got = host(cuda_ops.moe_linear(cuda_ops.to_device(x), w, cuda_ops.to_device(ids, np.int64)))
    assert relative_error(got, ref_moe.moe_linear(x, w, ids)) < 1e-5
    with pytest.raises(ValueError, match="moe_linear"):
        cuda_ops.moe_linear(x[:1], w, ids)


@pytest.mark.parametrize("normalize", [True, False])
def test_moe_route_and_combine(normalize):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((5, 8)).astype(np.float32)
    logits[0, 3] = logits[0, 5] = logits[0].max() + 1  # a tie at the top: the lower expert id comes first
    logits[1, 2] = logits[1, 6]
    ids, weights = ref_moe.moe_route(logits, 3, normalize)
    got_ids, got_weights = cuda_ops.moe_route(logits, 3, normalize)
    np.testing.assert_array_equal(host(got_ids), ids)
    np.testing.assert_allclose(host(got_weights), weights, atol=1e-6)
    expert_out = rng.standard_normal((15, 7)).astype(np.float32)
    np.testing.assert_allclose(host(cuda_ops.moe_combine(expert_out, got_weights)),
                               ref_moe.moe_combine(expert_out, weights), atol=1e-5)
    with pytest.raises(ValueError, match="top_k"):
        cuda_ops.moe_route(logits, 9, normalize)


@pytest.mark.parametrize("on_device", [False, True], ids=["host_state", "device_state"])
def test_conv1d_silu_updates_the_state(on_device):
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((5, 4)).astype(np.float32)
    state = rng.standard_normal((3, 5)).astype(np.float32)
    expected_state = state.copy()
    for num_tokens in (4, 1, 2):  # prefill, then decode steps: the state carries over (T < K-1 included)
        x = rng.standard_normal((num_tokens, 5)).astype(np.float32)
        expected = ref_dn.conv1d_silu(x, weight, expected_state)
        device_state = cuda_ops.to_device(state) if on_device else state
        np.testing.assert_allclose(host(cuda_ops.conv1d_silu(x, weight, device_state)), expected,
                                   rtol=1e-5, atol=1e-6)
        state = host(device_state).copy() if on_device else state
        np.testing.assert_array_equal(state, expected_state)


@pytest.mark.parametrize("rule", ["recurrent", "chunked"])
def test_delta_rule_matches_the_reference_and_carries_the_state(rule):
    rng = np.random.default_rng(4)
    q, k, v, g, beta, state = deltanet_inputs(rng, 5, heads=2)
    expected_state = state.copy()
    expected = ref_dn.gated_delta_rule_recurrent(q, k, v, g, beta, expected_state)
    op = getattr(cuda_ops, f"gated_delta_rule_{rule}")
    device_state = cuda_ops.to_device(state)
    np.testing.assert_allclose(host(op(q, k, v, g, beta, device_state)), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host(device_state), expected_state, rtol=1e-4, atol=1e-5)
    step = deltanet_inputs(rng, 1, heads=2)[:5]  # a decode step on a host state (as the recurrent state pool holds it)
    expected = ref_dn.gated_delta_rule_recurrent(*step, expected_state)
    host_state = host(device_state).copy()
    np.testing.assert_allclose(host(cuda_ops.gated_delta_rule_recurrent(*step, host_state)), expected,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(host_state, expected_state, rtol=1e-4, atol=1e-5)


def test_l2_normalize_rows_and_heads():
    x = np.random.default_rng(5).standard_normal((3, 2, 40)).astype(np.float32)
    np.testing.assert_allclose(host(cuda_ops.l2_normalize(x)), ref_dn.l2_normalize(x), rtol=1e-5, atol=1e-6)


def test_apply_experts_with_a_gated_shared_expert_matches_the_cpu(monkeypatch):
    """The model's MoE block (route, expert SwiGLUs, combine, sigmoid-gated shared expert) on ops=cuda, with no
    host round trip (row repeat and shared-expert gate run on the device)."""
    from pocketcli.models.qwen3_moe import ExpertWeights, apply_experts
    from tests.kernels.kernel_test_data import random_weight

    rng = np.random.default_rng(6)
    experts = ExpertWeights(
        router=random_weight(QT.F32, (4, 32), rng), gate=stacked_experts(QT.Q8_0, rng, rows=32, cols=32),
        up=stacked_experts(QT.Q8_0, rng, rows=32, cols=32), down=stacked_experts(QT.Q8_0, rng, rows=32, cols=32),
        top_k=2, normalize=True, shared_gate=random_weight(QT.F32, (32, 32), rng),
        shared_up=random_weight(QT.F32, (32, 32), rng), shared_down=random_weight(QT.F32, (32, 32), rng),
        shared_router=random_weight(QT.F32, (1, 32), rng))
    h = rng.standard_normal((2, 32)).astype(np.float32)
    expected = apply_experts(get_ops("reference"), experts, h)  # the CPU kernels' oracle: no numba compile
    h_device = cuda_ops.to_device(h)
    for name in ("to_host", "to_device"):
        monkeypatch.setattr(cuda_ops, name, lambda *a, op=name: pytest.fail(f"apply_experts called ops.{op}"))
    got = apply_experts(cuda_ops, experts, h_device)
    monkeypatch.undo()
    assert relative_error(host(got), expected) < 1e-5


def smaller_qwen3_moe_config(arch):
    """Qwen3-MoE at a size the simulator runs quickly: one routed layer (4 experts, top 2), 64 logits."""
    import transformers as tf

    from tests.hf import tiny_qwen_next_hf as hf

    attention = dict(hf.ATTENTION, vocab_size=64, hidden_size=32, intermediate_size=32, num_attention_heads=2,
                     num_key_value_heads=1)
    experts = dict(hf.EXPERTS, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    return tf.Qwen3MoeConfig(**attention, **experts, num_hidden_layers=1, mlp_only_layers=[])


def test_tiny_qwen3_moe_greedy_tokens_match_the_cpu(tmp_path, monkeypatch):
    """A tiny Qwen3-MoE GGUF (Q8_0 experts) through the engine: ops=cuda gives the CPU's greedy tokens."""
    pytest.importorskip("transformers")
    from pocketcli.config import EngineConfig
    from pocketcli.engine.llm_engine import LLMEngine
    from pocketcli.sampling_params import SamplingParams
    from tests.hf import tiny_qwen_next_hf
    from tests.models.test_qwen3_moe_gguf import write_gguf

    monkeypatch.setattr(tiny_qwen_next_hf, "make_config", smaller_qwen3_moe_config)
    path = str(write_gguf(tmp_path / "moe.gguf", tiny_qwen_next_hf.make_model("qwen3moe"), QT.Q8_0))
    tokens = {}
    for backend in ("reference", "cuda"):  # the CPU kernels' oracle on the host: no numba compile
        engine = LLMEngine(EngineConfig(path, ctx_size=32, backend=backend, block_size=4))
        seq = engine.add_request([1, 17, 60], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
        while engine.has_unfinished():
            engine.step()
        tokens[backend] = seq.token_ids[3:]
    assert tokens["cuda"] == tokens["reference"] and len(tokens["reference"]) == 2  # a prefill and a decode step
