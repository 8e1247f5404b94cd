"""Absorbed MLA (DeepSeek-V3 caches the normed KV latent and the rope key, W_UK folded into the query and W_UV
into the output) against the expanded form (per-head K/V from kv_b for every cached token, as HF computes): the
same logits within float32 rounding and the same greedy tokens, alone, batched, on prefix-cache hits and under
`--spec mtp` with the nextn layer, on the reference and cpu backends; and the cache it holds per token."""
from unittest import mock

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.engine.sequence import Sequence  # noqa: E402
from pocketcli.models.deepseek_v3 import DeepseekV3Model  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import engine_greedy, hf_logits  # noqa: E402
from tests.hf.test_deepseek_yarn import DEEPSEEK_YARN  # noqa: E402
from tests.spec.test_spec_deepseek_mtp import (LAYERS, PROMPT, add_nextn_layer, make_config, make_engine,  # noqa: E402
                                               save_tiny_deepseek, write_deepseek_gguf)

HEADS, KV_LORA, ROPE, NOPE, VALUE = 4, 16, 8, 16, 12  # make_config's MLA sizes
LOGIT_TOLERANCE = 1e-4
PROMPTS = [PROMPT, [5, 9, 33, 2, 77, 120, 8], PROMPT[:7] + [300, 4, 18]]  # the third shares PROMPT's first block


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A YaRN DeepSeek-V3 (what real checkpoints look like) and its copy with a nextn layer."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mla")
    reference = save_tiny_deepseek(root / "dsv3", make_config(DEEPSEEK_YARN, max_position_embeddings=163840))
    return {"reference": reference, "dsv3": root / "dsv3", "mtp": add_nextn_layer(root / "dsv3", root / "mtp")}


def expanded_engine(path, **kwargs):
    with mock.patch.object(DeepseekV3Model, "absorb_mla", False):
        return make_engine(path, **kwargs)


def batch_greedy(engine, prompts, steps):
    """Every prompt in one running batch: the greedy tokens after each."""
    seqs = [engine.add_request(p, SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True)) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    return [s.token_ids[len(p):] for s, p in zip(seqs, prompts)]


def test_cache_holds_the_latent_and_rope_key_only(checkpoints):
    absorbed, expanded = make_engine(checkpoints["dsv3"]), expanded_engine(checkpoints["dsv3"])
    assert absorbed.kv_cache.keys[0].shape[2:] == (1, KV_LORA + ROPE) and absorbed.kv_cache.values[0].nbytes == 0
    assert expanded.kv_cache.keys[0].shape[2:] == (HEADS, NOPE + ROPE)
    slots = absorbed.kv_cache.num_blocks * absorbed.kv_cache.block_size
    assert absorbed.kv_cache.nbytes // slots == LAYERS * (KV_LORA + ROPE) * 4  # 288 bytes a token
    assert expanded.kv_cache.nbytes // slots == LAYERS * 2 * HEADS * (NOPE + ROPE) * 4  # 2304: V padded to K


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_absorbed_logits_match_expanded_and_transformers(checkpoints, backend):
    prompt = PROMPT * 3
    absorbed = make_engine(checkpoints["dsv3"], backend=backend).score(prompt)
    expanded = expanded_engine(checkpoints["dsv3"], backend=backend).score(prompt)
    assert np.abs(absorbed - expanded).max() < LOGIT_TOLERANCE
    assert np.abs(absorbed - hf_logits(checkpoints["reference"], prompt)).max() < LOGIT_TOLERANCE


def test_absorbed_batched_decoding_with_prefix_hits_matches_expanded(checkpoints):
    """Three sequences decoding in one batch, then the same prompts again: every block of the second round that
    a first-round sequence filled comes from the prefix cache, latents included."""
    absorbed = make_engine(checkpoints["dsv3"], max_num_seqs=3)
    expanded = expanded_engine(checkpoints["dsv3"], max_num_seqs=3)
    first = batch_greedy(absorbed, PROMPTS, 10)
    assert first == batch_greedy(expanded, PROMPTS, 10)
    again = absorbed.add_request(PROMPTS[0] + first[0][:4], SamplingParams(temperature=0.0, max_tokens=8,
                                                                         ignore_eos=True))
    while absorbed.has_unfinished():
        absorbed.step()
    assert again.num_prefix_cached_tokens >= 12
    assert again.token_ids[len(PROMPTS[0]) + 4:] == engine_greedy(expanded_engine(checkpoints["dsv3"]),
                                                                   PROMPTS[0] + first[0][:4], 8)
    assert first[0] == engine_greedy(make_engine(checkpoints["dsv3"]), PROMPTS[0], 10)  # batched == alone


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_absorbed_mtp_speculation_matches_expanded_greedy(checkpoints, backend):
    """The nextn layer's own cache is latent too; batched speculation over two sequences."""
    expected = batch_greedy(expanded_engine(checkpoints["mtp"], backend=backend, max_num_seqs=2), PROMPTS[:2], 16)
    speculative = make_engine(checkpoints["mtp"], backend=backend, spec="mtp", spec_k=2, max_num_seqs=2)
    assert batch_greedy(speculative, PROMPTS[:2], 16) == expected
    assert speculative.speculative.stats.num_draft_tokens > 0
    context = speculative.speculative.drafter._context(Sequence(PROMPT, SamplingParams(), 4))
    assert context.keys.shape[2:] == (1, KV_LORA + ROPE) and context.values.nbytes == 0


def test_llama_cpp_split_kv_b_gguf_runs_absorbed(checkpoints, tmp_path):
    """llama.cpp's MLA GGUFs (attn_k_b / attn_v_b, no attn_kv_b; one KV head): logits as transformers', greedy and
    `--spec mtp` output as the expanded safetensors engine's, even with absorption switched off (no kv_b to
    expand)."""
    path = write_deepseek_gguf(checkpoints["mtp"], tmp_path / "split.gguf", split_kv_b=True)
    engine = expanded_engine(path)
    assert not engine.model_file.has_tensor("blk.0.attn_kv_b.weight") and engine.hparams.num_kv_heads == 1
    assert engine.kv_cache.keys[0].shape[2:] == (1, KV_LORA + ROPE)
    assert np.abs(engine.score(PROMPT) - hf_logits(checkpoints["reference"], PROMPT)).max() < LOGIT_TOLERANCE
    expected = engine_greedy(expanded_engine(checkpoints["mtp"]), PROMPT, 16)
    assert engine_greedy(engine, PROMPT, 16) == expected
    speculative = make_engine(path, spec="mtp", spec_k=2)
    assert engine_greedy(speculative, PROMPT, 16) == expected
    assert speculative.speculative.stats.num_draft_tokens > 0


def test_split_kv_b_with_wrong_head_sizes_is_refused_at_load(checkpoints, tmp_path):
    from gguf_loader import ModelFileError

    path = write_deepseek_gguf(checkpoints["dsv3"], tmp_path / "bad.gguf", split_kv_b=True,
                               skip_keys=("deepseek2.attention.value_length_mla",))  # v read as kv_lora = 16
    with pytest.raises(ModelFileError, match="attn_v_b.weight has shape"):
        make_engine(path)
