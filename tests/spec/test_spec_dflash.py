"""DFlash: a tiny random checkpoint (safetensors + config.json) drafting for a tiny qwen3 target. The draft
forward matches an independent torch transcription of z-lab's reference, and greedy speculation is lossless."""
import json

import numpy as np
import pytest
import torch

from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine.speculative import DFlashCheckpointError
from pocketcli.sampling_params import SamplingParams
from tests.models.tiny_gguf import write_tiny_model
from tests.spec.spec_checkpoints import (BLOCK, D, FF, HEAD_DIM, HEADS, KV_HEADS, LAYERS, MASK,  # noqa: F401
                                         TARGET_LAYERS, write_dflash_checkpoint)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash")
    target = str(write_tiny_model(root / "target.gguf", "qwen3", seed=2))
    weights = write_dflash_checkpoint(root / "drafter")
    return target, str(root / "drafter"), weights


def torch_reference_logits(weights, target_features, block_ids, embed, lm_head, positions_ctx, positions_block):
    """z-lab dflash/model.py, transcribed: fc + hidden_norm context, KV injection, non-causal block."""
    w = {k: torch.from_numpy(v).double() for k, v in weights.items()}

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    def rope(x, pos):  # x [T, H, hd], neox halves
        inv = 10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
        ang = torch.tensor(pos, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
        x1, x2 = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    c = rms(torch.from_numpy(target_features).double() @ w["fc.weight"].T, w["hidden_norm.weight"])
    h = torch.from_numpy(embed[block_ids]).double()
    for i in range(LAYERS):
        p = f"layers.{i}."
        a = rms(h, w[p + "input_layernorm.weight"])
        q = rms((a @ w[p + "self_attn.q_proj.weight"].T).view(-1, HEADS, HEAD_DIM), w[p + "self_attn.q_norm.weight"])
        kv_in = torch.cat([c, a])
        k = rms((kv_in @ w[p + "self_attn.k_proj.weight"].T).view(-1, KV_HEADS, HEAD_DIM),
                w[p + "self_attn.k_norm.weight"])
        v = (kv_in @ w[p + "self_attn.v_proj.weight"].T).view(-1, KV_HEADS, HEAD_DIM)
        q, k = rope(q, positions_block), rope(k, positions_ctx + positions_block)
        k, v = k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                                             v.transpose(0, 1), is_causal=False)
        h = h + o.transpose(0, 1).reshape(len(block_ids), -1) @ w[p + "self_attn.o_proj.weight"].T
        m = rms(h, w[p + "post_attention_layernorm.weight"])
        h = h + (torch.nn.functional.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
    return (rms(h[1:], w["norm.weight"]) @ torch.from_numpy(lm_head).double().T).numpy()


def test_draft_forward_matches_the_reference(setup):
    target, drafter_path, weights = setup
    engine = LLMEngine(EngineConfig(target, ctx_size=128, spec="dflash", draft_model_path=drafter_path,
                                    backend="reference"))
    prompt = [1, 40, 41, 42, 43, 44, 45, 46, 47]
    seq = engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=1))
    engine.step()
    drafter = engine.speculative.drafter
    features = np.concatenate([engine.model.tapped_hidden[layer] for layer in TARGET_LAYERS], axis=1)
    block = np.array([seq.token_ids[-1]] + [MASK] * (BLOCK - 1))
    num_ctx = len(prompt)
    model = drafter.model
    ours = model.draft_logits(block, np.arange(num_ctx, num_ctx + BLOCK),
                              model.context_kv(model.context_rows(features), np.arange(num_ctx)))
    embed = np.array(engine.model.token_embedding.data).view(np.float32).reshape(-1, D)  # F32 tiny target
    lm_head = np.array(engine.model.lm_head.data).view(np.float32).reshape(-1, D)
    expected = torch_reference_logits(weights, features, block, embed, lm_head, list(range(num_ctx)),
                                      list(range(num_ctx, num_ctx + BLOCK)))
    np.testing.assert_allclose(ours, expected, rtol=1e-3, atol=1e-3)


def test_dflash_greedy_speculation_is_lossless(setup):
    target, drafter_path, _ = setup
    prompts = [[1] + list(range(40, 56)), [1, 9, 8, 7, 9, 8, 7, 9]]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = LLMEngine(EngineConfig(target, ctx_size=128))
    expected = [[t for c in stream_generate(plain, p, params) for t in c.token_ids] for p in prompts]
    engine = LLMEngine(EngineConfig(target, ctx_size=128, max_num_seqs=2, spec="dflash",
                                    draft_model_path=drafter_path, spec_k=BLOCK - 1))
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    assert [s.completion_token_ids for s in seqs] == expected
    stats = engine.speculative.stats
    assert stats.num_draft_tokens > 0 and stats.num_rounds > 0
    assert not engine.speculative.drafter.contexts  # released with their sequences


def test_a_checkpoint_that_does_not_fit_the_target_is_refused(setup, tmp_path):
    target, _, _ = setup
    write_dflash_checkpoint(tmp_path / "bad")
    config = json.loads((tmp_path / "bad" / "config.json").read_text())
    config["dflash_config"]["target_layer_ids"] = [0, 7]
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(DFlashCheckpointError, match="target layer 7"):
        LLMEngine(EngineConfig(target, ctx_size=64, spec="dflash", draft_model_path=str(tmp_path / "bad")))
    with pytest.raises(DFlashCheckpointError, match="config.json"):
        LLMEngine(EngineConfig(target, ctx_size=64, spec="dflash", draft_model_path=str(tmp_path)))
