"""A tiny Qwen3.5 (Gated DeltaNet + gated attention) and Qwen3-Next (grouped projections, experts) through the
engine with ops=cuda: the host's greedy tokens, the recurrent state on the device, speculative rollback there.

The host side runs the numpy reference backend (the oracle the CPU kernels are tested against), which needs no
numba compile: the CPU kernels' cache is dropped whenever any of their sources changes."""
import numpy as np
import pytest

pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf import tiny_qwen_next_hf  # noqa: E402

PROMPT = [1, 17, 60, 45, 9]  # ids below the smaller vocabulary


def smaller_hybrid_config(arch):
    """Two layers (Gated DeltaNet, then gated attention) at a size the simulator runs quickly: each mat-vec block
    of 32 rows costs ~0.1 s, so 64 logits and 16-dim heads; still two value heads per key head (grouped and tiled
    layouts differ) and a partial rotary (4 of 16 dims)."""
    import transformers as tf

    hf = tiny_qwen_next_hf
    attention = dict(hf.ATTENTION, vocab_size=64, hidden_size=32, intermediate_size=32, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16)
    deltanet = dict(hf.DELTANET, linear_key_head_dim=8, linear_value_head_dim=8)
    layers = dict(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
    if arch == "qwen35":
        return tf.Qwen3_5TextConfig(**attention, **deltanet, **layers)
    experts = dict(hf.EXPERTS, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    return tf.Qwen3NextConfig(**attention, **deltanet, **experts, **layers, shared_expert_intermediate_size=16)


@pytest.fixture(scope="module")
def hybrid_paths(tmp_path_factory):
    from tests.models.test_qwen35_gguf import write_gguf

    patch = pytest.MonkeyPatch()
    patch.setattr(tiny_qwen_next_hf, "make_config", smaller_hybrid_config)
    root = tmp_path_factory.mktemp("hybrid_cuda")
    try:
        qwen35 = write_gguf(root / "qwen35.gguf", tiny_qwen_next_hf.make_model("qwen35"))  # llama.cpp layout
        qwen3next = root / "qwen3next"
        tiny_qwen_next_hf.save_tiny_model(qwen3next, "qwen3next")  # HF directory: grouped qkvz / ba
    finally:
        patch.undo()
    return {"qwen35": str(qwen35), "qwen3next": str(qwen3next)}


def greedy(path, backend, new_tokens=3, **config):
    engine = LLMEngine(EngineConfig(path, ctx_size=32, backend=backend, block_size=4, **config))
    seq = engine.add_request(list(PROMPT), SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return seq.token_ids[len(PROMPT):], engine


@pytest.mark.parametrize("arch", ["qwen35", "qwen3next"])
def test_hybrid_greedy_tokens_match_the_host(hybrid_paths, arch, monkeypatch):
    """Prefill (chunked delta rule) and decode steps: same tokens, each drawn next to the device logits
    (DeviceSampler); the recurrent states live on the device."""
    from pocketcli.engine.device_sampler import DeviceSampler

    host_tokens, _ = greedy(hybrid_paths[arch], "reference")
    device_draws = []
    sample = DeviceSampler.sample
    monkeypatch.setattr(DeviceSampler, "sample", lambda self, logits, items: (
        device_draws.append(self.ops.is_device_array(logits)), sample(self, logits, items))[1])
    cuda_tokens, cuda_engine = greedy(hybrid_paths[arch], "cuda")
    assert cuda_tokens == host_tokens and len(set(host_tokens)) == 3  # three different tokens: no step repeats
    assert device_draws == [True] * 3
    ops, pool = cuda_engine.model.ops, cuda_engine.kv_cache.recurrent
    assert ops.is_device_array(pool.ssm[0]) and ops.is_device_array(pool.conv[0])


def _forward(engine, seq, num_new: int, num_draft_tokens: int = 0) -> None:
    """The next num_new tokens of seq through the model (KV and recurrent state; no logits: the simulator is slow)."""
    from pocketcli.engine.scheduler import ScheduledBatch, ScheduledSeq

    engine.block_manager.allocate(seq, seq.num_cached_tokens + num_new)
    item = ScheduledSeq(seq, num_new)
    item.num_draft_tokens = num_draft_tokens  # > 0: a speculative verification (keeps rollback records)
    token_ids, positions, attn, _ = engine.runner.prepare_inputs(ScheduledBatch([item]))
    engine.model.forward(token_ids, positions, attn, engine.kv_cache.keys, engine.kv_cache.values)
    seq.num_cached_tokens += num_new


def test_rollback_after_a_rejected_draft_restores_the_device_state(hybrid_paths):
    """Verify [last prompt token + 2 drafts] on the device, accept 1: free_tail leaves the state of decoding the
    accepted token only (recomputed on the device from the verification's records), equal to the host's; and
    snapshot + restore + recomputing gives it too."""
    from pocketcli.engine.sequence import Sequence

    path, drafts = hybrid_paths["qwen35"], [40, 41]
    host_engine = LLMEngine(EngineConfig(path, ctx_size=32, backend="reference", block_size=4))
    accepted = Sequence(PROMPT + drafts[:1], SamplingParams(temperature=0.0), 4)
    _forward(host_engine, accepted, len(PROMPT) - 1)
    _forward(host_engine, accepted, 2)  # the last prompt token and the accepted draft
    expected = host_engine.kv_cache.recurrent.snapshot(accepted.seq_id)
    engine = LLMEngine(EngineConfig(path, ctx_size=32, backend="cuda", block_size=4))
    pool, host = engine.kv_cache.recurrent, engine.model.ops.to_host

    def assert_expected_state():
        ours = pool.snapshot(target.seq_id)
        assert engine.model.ops.is_device_array(ours.ssm[0])  # snapshots stay on the device
        np.testing.assert_allclose(host(ours.ssm[0]), expected.ssm[0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(host(ours.conv[0]), expected.conv[0], atol=1e-6, rtol=0)

    target = Sequence(PROMPT + drafts, SamplingParams(temperature=0.0), engine.config.block_size)
    _forward(engine, target, len(PROMPT) - 1)
    snapshot = pool.snapshot(target.seq_id)
    _forward(engine, target, 1 + len(drafts), num_draft_tokens=len(drafts))
    assert not np.allclose(host(pool.snapshot(target.seq_id).ssm[0]), expected.ssm[0], atol=1e-4)
    del target.token_ids[len(PROMPT) + 1:]
    target.num_cached_tokens = len(PROMPT) + 1
    engine.block_manager.free_tail(target)
    assert_expected_state()
    pool.restore(target.seq_id, snapshot)
    target.num_cached_tokens = len(PROMPT) - 1
    _forward(engine, target, 2)
    assert_expected_state()
