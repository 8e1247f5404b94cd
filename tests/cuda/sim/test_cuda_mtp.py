"""`--spec mtp` on the (simulated) GPU: the MTP block's paged K/V cache, its hidden states and logits stay on the
device; greedy speculative output equals plain greedy output on the same device, and the drafts are the ones
the host backend proposes (so the device MTP step computes what the host's does, not just anything lossless)."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from tests.hf import tiny_hf  # noqa: E402
from tests.spec.spec_checkpoints import add_mimo_mtp_layer  # noqa: E402

PROMPT = [1, 19, 10, 34]  # ids below the smaller vocabulary; two rounds, one draft accepted, two rejected
NEW_TOKENS = 4


def smaller_qwen2_config(arch):
    """One Qwen2 layer (q/k/v biases) at a size the simulator runs quickly (every kernel launch costs ~0.1 s, and
    each attention head and each 32 rows of a mat-vec one warp): 64 logits, one 16-dim head."""
    import transformers as tf

    assert arch == "qwen2"
    return tf.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                          num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=64, rms_norm_eps=1e-6,
                          tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                          rope_parameters={"rope_type": "default", "rope_theta": 1e6})


@pytest.fixture(scope="module")
def mimo_echo(tmp_path_factory):
    """A MiMo checkpoint whose MTP often predicts right (echo: see add_mimo_mtp_layer), so drafts are accepted and
    rejected both."""
    import torch

    torch.set_num_threads(1)
    patch = pytest.MonkeyPatch()
    patch.setattr(tiny_hf, "make_config", smaller_qwen2_config)
    root = tmp_path_factory.mktemp("mimo_cuda")
    try:
        tiny_hf.save_tiny_model(root / "qwen2", "qwen2")
    finally:
        patch.undo()
    return add_mimo_mtp_layer(root / "qwen2", root / "echo", echo=True)


def greedy(path, backend, **spec):
    """(greedy tokens, engine, the MTP drafter's context of the sequence as it was before release, or None)."""
    from pocketcli.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(str(path), ctx_size=32, block_size=4, backend=backend, **spec))
    seq = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
    drafter, ctx = getattr(engine.speculative, "drafter", None), None
    while engine.has_unfinished():
        engine.step()
        ctx = drafter.contexts.get(seq.seq_id, ctx) if drafter else None
    return seq.token_ids[len(PROMPT):], engine, ctx


def test_mimo_mtp_speculation_on_the_device_is_lossless_and_drafts_as_the_host(mimo_echo):
    host_tokens, host, host_ctx = greedy(mimo_echo, "reference", spec="mtp", spec_k=2)
    tokens, engine, ctx = greedy(mimo_echo, "cuda", spec="mtp", spec_k=2)
    ops = engine.model.ops
    assert ops.is_device_array(ctx.keys) and ops.is_device_array(ctx.values) and ops.is_device_array(ctx.hidden)
    assert all(ops.is_device_array(rows) for rows in engine.model.tapped_hidden.values())  # target hidden too
    assert tokens == greedy(mimo_echo, "cuda")[0] == host_tokens
    stats, host_stats = engine.speculative.stats, host.speculative.stats
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens  # accepted and rejected drafts both
    assert (stats.num_draft_tokens, stats.num_accepted_tokens) == (host_stats.num_draft_tokens,
                                                                   host_stats.num_accepted_tokens)
    assert ctx.num_paired == host_ctx.num_paired > len(PROMPT)  # re-run over accepted tokens too

    def verified_rows(keys):
        return ops.to_host(keys).reshape(-1, *keys.shape[2:])[:ctx.num_paired]

    assert np.abs(verified_rows(ctx.keys) - verified_rows(host_ctx.keys)).max() < 1e-4


def assert_catch_up_step_matches_the_host(path, hidden_size: int, key_shape: tuple) -> None:
    """One MTP catch-up step over PROMPT (random target hidden states) on the device and on the host: the MTP's
    cache allocated on the device in the target's kv_cache_layout; logits, MTP hidden and cache entries alike."""
    from pocketcli.engine.sequence import Sequence
    from pocketcli.sampling_params import SamplingParams

    hidden = np.random.default_rng(0).normal(0, 1, (len(PROMPT) - 1, hidden_size)).astype(np.float32)
    results = {}
    for backend in ("reference", "cuda"):
        engine = LLMEngine(EngineConfig(str(path), ctx_size=32, block_size=4, backend=backend, spec="mtp",
                                        spec_k=2))  # cuda: no longer refused
        drafter = engine.speculative.drafter
        ctx = drafter._context(Sequence(PROMPT, SamplingParams(), engine.config.block_size))
        logits, out = drafter._step(ctx, np.asarray(PROMPT[1:]), hidden, np.arange(len(PROMPT) - 1))
        to_host = engine.model.ops.to_host if backend == "cuda" else np.asarray
        results[backend] = [to_host(a) for a in (logits, out, ctx.keys, ctx.values)]
    assert engine.model.ops.is_device_array(ctx.keys) and tuple(ctx.keys.shape[2:]) == key_shape
    for host, device in zip(results["reference"], results["cuda"]):
        assert device.shape == host.shape and (not host.size or np.abs(device - host).max() < 1e-4)


def test_deepseek_nextn_step_on_the_device_matches_the_host(tmp_path):
    """DeepSeek-V3's nextn block (absorbed MLA: a latent | rope-key cache, no values; the embedding zeroed at
    position 0 on the device). The whole speculative loop on the device is the one the MiMo test runs."""
    from tests.cuda.sim.test_cuda_deepseek_mla import smaller_deepseek_config
    from tests.spec.spec_checkpoints import add_nextn_layer, save_tiny_deepseek

    config = smaller_deepseek_config()
    config.vocab_size, config.num_nextn_predict_layers = 64, 1  # 64 logits: two mat-vec blocks for the head
    save_tiny_deepseek(tmp_path / "dsv3", config)
    path = add_nextn_layer(tmp_path / "dsv3", tmp_path / "mtp")  # shaped from the saved config.json
    assert_catch_up_step_matches_the_host(path, config.hidden_size, (1, 16 + 8))


def test_qwen35_mtp_step_on_the_device_matches_the_host(tmp_path):
    """Qwen3.5's mtp.* block: gated attention with a partial rotary (a hybrid target: DeltaNet, then attention)."""
    from tests.cuda.sim.test_cuda_hybrid_model import smaller_hybrid_config
    from tests.hf import tiny_qwen_next_hf
    from tests.spec.spec_checkpoints import add_qwen35_mtp_weights as add_mtp_weights

    patch = pytest.MonkeyPatch()
    patch.setattr(tiny_qwen_next_hf, "make_config", smaller_hybrid_config)
    try:
        tiny_qwen_next_hf.save_tiny_model(tmp_path / "qwen35", "qwen35")
    finally:
        patch.undo()
    config = smaller_hybrid_config("qwen35")
    path = add_mtp_weights(tmp_path / "qwen35", tmp_path / "qwen35_mtp", config.hidden_size,
                           config.layer_types.index("full_attention"))
    assert_catch_up_step_matches_the_host(path, config.hidden_size, (config.num_key_value_heads, config.head_dim))


def test_a_family_without_a_device_mtp_step_is_refused_in_one_line(mimo_echo, monkeypatch):
    from pocketcli.engine.speculative import SpeculationUnavailableError
    from pocketcli.models.mimo import MiMoModel

    monkeypatch.setattr(MiMoModel, "mtp_on_device", False)
    with pytest.raises(SpeculationUnavailableError, match="runs on the cpu backend only") as error:
        LLMEngine(EngineConfig(str(mimo_echo), ctx_size=32, backend="cuda", spec="mtp"))
    assert "\n" not in str(error.value)
