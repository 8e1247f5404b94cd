"""DFlash drafters from llama.cpp GGUFs (arch `dflash`): the same tiny checkpoint as test_spec_dflash written in
llama.cpp's layout (fc, enc.output_norm, output_norm, Qwen3 block names, target_layers + 1, the tokenizer's mask
token id) loads to the same weights and drafts the same tokens; quantized, greedy speculation stays lossless."""
import dataclasses

import gguf
import numpy as np
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.engine.speculative import DFlashCheckpointError
from pocketcli.engine.speculative.dflash_gguf import load_dflash_gguf
from pocketcli.models.dflash import load_dflash_checkpoint
from pocketcli.sampling_params import SamplingParams
from tests.models.tiny_gguf import finish_gguf, write_tiny_model
from tests.spec.test_spec_dflash import (BLOCK, D, FF, HEAD_DIM, HEADS, KV_HEADS, LAYERS, MASK, TARGET_LAYERS,
                                         write_dflash_checkpoint)

GGUF_BLOCK_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
                    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                    "mlp.down_proj": "ffn_down"}
GGUF_TOP_NAMES = {"fc.weight": "fc.weight", "hidden_norm.weight": "enc.output_norm.weight",
                  "norm.weight": "output_norm.weight"}


def gguf_name(zlab_name: str) -> str:
    if zlab_name in GGUF_TOP_NAMES:
        return GGUF_TOP_NAMES[zlab_name]
    _, layer, rest = zlab_name.split(".", 2)
    module = rest.removesuffix(".weight")
    return f"blk.{layer}.{GGUF_BLOCK_NAMES[module]}.weight"


def write_dflash_gguf(path, weights, quant=gguf.GGMLQuantizationType.F32, target_layers=True):
    """llama.cpp's DFlash GGUF of z-lab `weights` (matrices in `quant`, vectors F32)."""
    writer = gguf.GGUFWriter(str(path), "dflash")
    writer.add_context_length(2048)
    writer.add_embedding_length(D)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    if target_layers:
        writer.add_array("dflash.target_layers", [layer + 1 for layer in TARGET_LAYERS])  # inputs of layer + 1
    writer.add_uint32("dflash.block_size", BLOCK)
    writer.add_uint32("tokenizer.ggml.mask_token_id", MASK)
    for name, array in weights.items():
        if array.ndim == 1 or quant == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(gguf_name(name), array)
        else:
            writer.add_tensor(gguf_name(name), gguf.quants.quantize(array, quant), raw_dtype=quant)
    finish_gguf(writer)
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash_gguf")
    weights = write_dflash_checkpoint(root / "drafter")
    return {"target": str(write_tiny_model(root / "target.gguf", "qwen3", seed=2)),
            "safetensors": str(root / "drafter"), "weights": weights,
            "f32": write_dflash_gguf(root / "drafter_f32.gguf", weights),
            "q8_0": write_dflash_gguf(root / "drafter_q8.gguf", weights, gguf.GGMLQuantizationType.Q8_0)}


def test_gguf_loads_the_same_config_and_weights(setup):
    config, weights = load_dflash_gguf(setup["f32"])
    reference_config, reference = load_dflash_checkpoint(setup["safetensors"])
    assert config.rms_norm_eps == pytest.approx(reference_config.rms_norm_eps)  # GGUF stores a float32
    assert dataclasses.replace(config, rms_norm_eps=reference_config.rms_norm_eps) == reference_config
    assert config.target_layer_ids == tuple(TARGET_LAYERS)  # the file's inputs of layer + 1, mapped back
    assert sorted(weights) == sorted(reference)
    for name, array in reference.items():
        np.testing.assert_array_equal(weights[name], array, err_msg=name)


def first_drafts(target, drafter_path, prompt):
    engine = LLMEngine(EngineConfig(target, ctx_size=128, spec="dflash", draft_model_path=drafter_path,
                                    spec_k=BLOCK - 1))
    seq = engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    engine.step()  # prefill: the drafter sees the prompt's target features
    (draft,) = engine.speculative.drafter.propose([seq], [BLOCK - 1])
    return draft.token_ids


def test_gguf_drafter_drafts_like_the_safetensors_one(setup):
    prompt = [1, 40, 41, 42, 43, 44, 45, 46, 47]
    expected = first_drafts(setup["target"], setup["safetensors"], prompt)
    assert len(expected) == BLOCK - 1
    assert first_drafts(setup["target"], setup["f32"], prompt) == expected


def test_quantized_gguf_drafter_greedy_speculation_is_lossless(setup):
    prompts = [[1] + list(range(40, 56)), [1, 9, 8, 7, 9, 8, 7, 9]]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = LLMEngine(EngineConfig(setup["target"], ctx_size=128))
    expected = [[t for c in stream_generate(plain, p, params) for t in c.token_ids] for p in prompts]
    engine = LLMEngine(EngineConfig(setup["target"], ctx_size=128, max_num_seqs=2, spec="dflash",
                                    draft_model_path=setup["q8_0"], spec_k=BLOCK - 1))
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    assert [s.completion_token_ids for s in seqs] == expected
    assert engine.speculative.stats.num_draft_tokens > 0


def test_gguf_that_is_not_a_dflash_drafter_is_refused(setup, tmp_path):
    no_layers = write_dflash_gguf(tmp_path / "no_layers.gguf", setup["weights"], target_layers=False)
    with pytest.raises(DFlashCheckpointError, match="target_layers"):
        LLMEngine(EngineConfig(setup["target"], ctx_size=64, spec="dflash", draft_model_path=no_layers))
    with pytest.raises(DFlashCheckpointError, match="not a DFlash draft model"):
        LLMEngine(EngineConfig(setup["target"], ctx_size=64, spec="dflash", draft_model_path=setup["target"]))
