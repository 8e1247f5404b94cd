"""Qwen3.5 and Qwen3-Next (Gated DeltaNet hybrids) from HF directories against transformers; recurrent state."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.engine.recurrent_state import RecurrentBlockManager  # noqa: E402
from pocketcli.engine.scheduler import ScheduledBatch, ScheduledSeq  # noqa: E402
from pocketcli.engine.sequence import Sequence  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import engine_greedy, hf_logits  # noqa: E402
from tests.hf.tiny_qwen_next_hf import hf_greedy_cached, save_tiny_model, single_torch_thread  # noqa: E402
from tests.spec.spec_checkpoints import add_qwen35_mtp_weights as add_mtp_weights  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
single_torch_thread = pytest.fixture(scope="module", autouse=True)(single_torch_thread)
GREEDY_STEPS = 32
LOGIT_TOLERANCE = 1e-4  # float32 on both sides (measured ~2e-5 on logits of ~4)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid")
    return {arch: (root / arch, save_tiny_model(root / arch, arch)) for arch in ("qwen35", "qwen3next", "qwen35moe")}


def make_engine(path, backend="reference", **kwargs) -> LLMEngine:
    return LLMEngine(EngineConfig(str(path), ctx_size=128, backend=backend, **kwargs))


@pytest.mark.parametrize("arch", ["qwen35", "qwen3next", "qwen35moe"])
def test_hybrid_matches_transformers(model_dirs, arch):
    path, reference = model_dirs[arch]
    engine = make_engine(path)
    assert isinstance(engine.block_manager, RecurrentBlockManager) and not engine.block_manager.enable_prefix_caching
    assert sorted(engine.kv_cache.recurrent.conv) == [0, 1, 2]  # layers 0-2 Gated DeltaNet, 3 full attention
    error = float(np.abs(engine.score(PROMPT) - hf_logits(reference, PROMPT)).max())
    assert error < LOGIT_TOLERANCE
    assert engine_greedy(engine, PROMPT, GREEDY_STEPS) == hf_greedy_cached(reference, PROMPT, GREEDY_STEPS)


def test_cpu_backend_matches_reference(model_dirs):
    path, _ = model_dirs["qwen3next"]
    np.testing.assert_allclose(make_engine(path, "cpu").score(PROMPT), make_engine(path).score(PROMPT),
                               atol=1e-4, rtol=0)


def test_chunked_prefill_equals_token_by_token(model_dirs):
    """Prefill in chunks of 5 (state carried across chunks), in one chunk, and one token per step: same tokens,
    same final recurrent state."""
    path, _ = model_dirs["qwen35"]
    results = []
    for chunk in (len(PROMPT), 5, 1):
        engine = make_engine(path, max_num_batched_tokens=chunk)
        seq = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
        states = {}
        while engine.has_unfinished():
            if seq.num_cached_tokens == len(PROMPT) - 1 + 3:  # about to compute the 4th-last token's successor
                states = engine.kv_cache.recurrent.snapshot(seq.seq_id)
            engine.step()
        results.append((seq.token_ids, states))
    for tokens, states in results[1:]:
        assert tokens == results[0][0]
        for layer, state in states.ssm.items():
            np.testing.assert_allclose(state, results[0][1].ssm[layer], atol=1e-5, rtol=0)


def _forward(engine: LLMEngine, seq: Sequence, num_new: int, num_draft_tokens: int = 0) -> np.ndarray:
    """Run the next num_new tokens of seq through the model (KV and recurrent state), return their logits."""
    engine.block_manager.allocate(seq, seq.num_cached_tokens + num_new)
    item = ScheduledSeq(seq, num_new)
    item.num_draft_tokens = num_draft_tokens  # > 0: a speculative verification (keeps rollback records)
    logits = engine.runner.run(ScheduledBatch([item]), first_logit_token=0)
    seq.num_cached_tokens += num_new
    return logits


def _states_after_decoding(engine: LLMEngine, token_ids: list[int], num_prefill: int):
    """The recurrent state after prefilling num_prefill tokens, then decoding the rest one by one."""
    seq = Sequence(token_ids, SamplingParams(temperature=0.0), engine.config.block_size)
    _forward(engine, seq, num_prefill)
    for _ in range(len(token_ids) - num_prefill):
        _forward(engine, seq, 1)
    return engine.kv_cache.recurrent.snapshot(seq.seq_id)


def _assert_same_states(ours, theirs):
    for layer in theirs.ssm:
        np.testing.assert_allclose(ours.ssm[layer], theirs.ssm[layer], atol=1e-5, rtol=0)
        np.testing.assert_allclose(ours.conv[layer], theirs.conv[layer], atol=1e-6, rtol=0)


@pytest.mark.parametrize("num_accepted", [0, 2, 4])
def test_rollback_after_rejected_draft(model_dirs, num_accepted):
    """Verify [last token + 4 drafts]; with num_accepted drafts accepted, the speculative decoder's free_tail
    leaves the recurrent state of decoding the accepted tokens only (recomputed from the verification's
    records), and so does snapshot + restore + recomputing."""
    path, _ = model_dirs["qwen35"]
    engine = make_engine(path, max_num_seqs=3)
    pool = engine.kv_cache.recurrent
    drafts = [40, 41, 42, 43]
    expected = _states_after_decoding(engine, PROMPT + drafts[:num_accepted], len(PROMPT) - 1)

    target = Sequence(PROMPT + drafts, SamplingParams(temperature=0.0), engine.config.block_size)
    _forward(engine, target, len(PROMPT) - 1)
    snapshot = pool.snapshot(target.seq_id)
    _forward(engine, target, 1 + len(drafts), num_draft_tokens=len(drafts))
    if num_accepted < len(drafts):  # verification moved the state past rejected drafts
        assert not np.allclose(pool.snapshot(target.seq_id).ssm[0], expected.ssm[0], atol=1e-4)
    del target.token_ids[len(PROMPT) + num_accepted:]
    target.num_cached_tokens = len(PROMPT) + num_accepted
    engine.block_manager.free_tail(target)
    _assert_same_states(pool.snapshot(target.seq_id), expected)

    pool.restore(target.seq_id, snapshot)  # the other way back: restore, recompute the accepted tokens
    target.num_cached_tokens = len(PROMPT) - 1
    _forward(engine, target, 1 + num_accepted)
    _assert_same_states(pool.snapshot(target.seq_id), expected)


def test_speculative_greedy_is_lossless_on_a_hybrid_target(model_dirs):
    """Drafts verified on Qwen3.5, every other round with a wrong second token (so the recurrent state is rolled
    back past rejected drafts): the greedy tokens equal plain decoding's."""
    if "spec" not in EngineConfig.__dataclass_fields__:
        pytest.skip("speculative decoding is not in this tree")
    from pocketcli.engine.speculative import Draft, Drafter

    path, _ = model_dirs["qwen35"]
    expected = engine_greedy(make_engine(path), PROMPT, 24)

    class HalfWrongDrafter(Drafter):
        rounds = 0

        def propose(self, seqs, num_draft_tokens):
            self.rounds += 1
            done = len(seqs[0]) - len(PROMPT)
            tokens = list(expected[done:done + num_draft_tokens[0]])
            if self.rounds % 2 and len(tokens) > 1:
                tokens[1] = (tokens[1] + 1) % 320
            return [Draft(tokens)]

    engine = make_engine(path, spec="ngram", spec_k=4)
    engine.speculative.drafter = HalfWrongDrafter()
    assert engine_greedy(engine, PROMPT, 24) == expected
    stats = engine.speculative.stats
    assert stats.num_draft_tokens > stats.num_accepted_tokens > 0  # accepted and rejected drafts both


def test_batched_sequences_and_preemption_keep_their_own_state(model_dirs):
    """Two prompts decoded in one batch (one slot each), one of them preempted mid-way and recomputed from a
    fresh slot: each greedy continuation equals the one it gets alone."""
    path, _ = model_dirs["qwen35"]
    prompts = [PROMPT, [1, 90, 91, 92, 7, 8]]
    alone = [engine_greedy(make_engine(path), prompt, 12) for prompt in prompts]
    engine = make_engine(path, max_num_seqs=2)
    seqs = [engine.add_request(p, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)) for p in prompts]
    for step in range(100):
        if not engine.has_unfinished():
            break
        if step == 5:  # the newest running sequence gives back its blocks and its slot
            engine.scheduler._preempt(seqs[1])
        engine.step()
    assert [seq.token_ids[len(p):] for seq, p in zip(seqs, prompts)] == alone
    assert engine.kv_cache.recurrent.num_free_slots == engine.kv_cache.recurrent.num_slots


def test_slots_follow_sequences(model_dirs):
    """A slot is taken with the first blocks (zeroed) and given back with them; a full pool blocks admission."""
    path, _ = model_dirs["qwen35"]
    engine = make_engine(path, max_num_seqs=2)
    pool, manager = engine.kv_cache.recurrent, engine.block_manager
    seqs = [Sequence(PROMPT, SamplingParams(), engine.config.block_size) for _ in range(4)]
    for seq in seqs[:3]:
        assert manager.can_allocate(seq, len(PROMPT))
        manager.allocate(seq, len(PROMPT))
    assert pool.num_free_slots == 0 and not manager.can_allocate(seqs[3], len(PROMPT))
    slot = pool.slot_of(seqs[0].seq_id)
    pool.ssm[0][slot] = 1.0
    manager.deallocate(seqs[0])  # finish or preemption
    assert not pool.has_slot(seqs[0].seq_id) and manager.can_allocate(seqs[3], len(PROMPT))
    manager.allocate(seqs[3], len(PROMPT))
    assert pool.slot_of(seqs[3].seq_id) == slot and not pool.ssm[0][slot].any()  # recomputed from zero


@pytest.fixture(scope="module")
def mtp_dir(model_dirs, tmp_path_factory):
    return add_mtp_weights(model_dirs["qwen35"][0], tmp_path_factory.mktemp("mtp") / "qwen35_mtp")


def test_mtp_weights_load_beside_the_main_layers(model_dirs, mtp_dir):
    """The MTP block becomes block num_hidden_layers, as llama.cpp stores it; the main logits do not change."""
    engine = make_engine(mtp_dir)
    assert engine.hparams.num_layers == 5 and len(engine.model.layers) == 4
    (mtp,) = engine.model.mtp_layers
    assert mtp.layer_id == 4 and mtp.eh_proj.shape == (64, 128)
    np.testing.assert_allclose(mtp.hnorm, 1.5)  # HF's 1 + w, stored as GGUF's w + 1
    np.testing.assert_allclose(mtp.enorm, 1.0)
    assert mtp.layer.mixer.wq.shape == (256, 64)
    assert np.abs(engine.score(PROMPT) - hf_logits(model_dirs["qwen35"][1], PROMPT)).max() < LOGIT_TOLERANCE


def test_mtp_speculative_decoding_is_lossless(mtp_dir):
    """MTP drafts (greedy, chained through the block's own hidden) verified by the hybrid target: the greedy
    output equals plain decoding's."""
    if "spec" not in EngineConfig.__dataclass_fields__:
        pytest.skip("speculative decoding is not in this tree")
    from pocketcli.engine.speculative.mtp_drafter import MTPDrafter

    expected = engine_greedy(make_engine(mtp_dir), PROMPT, 24)
    engine = make_engine(mtp_dir, spec="ngram", spec_k=3)
    drafter = MTPDrafter(engine)  # --spec mtp once make_drafter returns it
    engine.speculative.drafter = drafter
    engine.model.tap_layer_ids = frozenset(engine.model.tap_layer_ids | drafter.tap_layer_ids)
    assert engine_greedy(engine, PROMPT, 24) == expected
    assert engine.speculative.stats.num_draft_tokens > 0


def test_mtp_block_matches_transformers_parts(model_dirs, mtp_dir):
    """The MTP step (vLLM's Qwen3.5 MTP: fc([norm_e(emb(t_{p+1})), norm_h(H_p)]) -> full-attention decoder layer
    -> norm -> lm_head) built from transformers' own Qwen3.5 layers on the same weights, over a whole prompt."""
    import torch
    from safetensors.torch import load_file
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q35

    from pocketcli.engine.speculative.mtp_drafter import MTPDrafter

    reference = model_dirs["qwen35"][1]
    weights = load_file(str(mtp_dir / "model.safetensors"))
    config = reference.config
    layer = q35.Qwen3_5DecoderLayer(config, layer_idx=3)
    layer.load_state_dict({k[len("mtp.layers.0."):]: v for k, v in weights.items() if k.startswith("mtp.layers.0.")})
    norm_e, norm_h, norm_out = (q35.Qwen3_5RMSNorm(64, eps=config.rms_norm_eps) for _ in range(3))
    for module, name in ((norm_e, "pre_fc_norm_embedding"), (norm_h, "pre_fc_norm_hidden"), (norm_out, "norm")):
        module.weight.data.copy_(weights[f"mtp.{name}.weight"])
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        hidden = reference.model(ids).last_hidden_state[0]  # post final norm
        x = torch.cat([norm_e(reference.model.embed_tokens(ids[0, 1:])), norm_h(hidden[:-1])], -1)
        x = (x @ weights["mtp.fc.weight"].T)[None]
        positions = torch.arange(len(PROMPT) - 1)[None]
        mask = torch.full((len(PROMPT) - 1,) * 2, float("-inf")).triu(1)[None, None]
        x = layer(x, position_embeddings=reference.model.rotary_emb(x, positions), attention_mask=mask)
        expected = reference.lm_head(norm_out(x))[0].numpy()

    engine = make_engine(mtp_dir)
    drafter = MTPDrafter(engine)
    seq = Sequence(PROMPT, SamplingParams(), engine.config.block_size)
    logits, _ = drafter._step(drafter._context(seq), np.asarray(PROMPT[1:]), hidden[:-1].numpy(),
                              np.arange(len(PROMPT) - 1))
    assert np.abs(logits - expected).max() < LOGIT_TOLERANCE
