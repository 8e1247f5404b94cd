"""DeepSeek-V3 with YaRN rope scaling (every released DeepSeek-V3 / R1 / Kimi-K2 config uses it) against
transformers' DeepseekV3ForCausalLM, from safetensors and from a GGUF carrying llama.cpp's rope.scaling.* keys;
the YaRN tables against transformers' own `_compute_yarn_parameters`."""
import numpy as np
import pytest

from gguf_loader import ModelFileError, UnsupportedModelError
from gguf_loader.yarn_rope import YarnRope, yarn_from_gguf, yarn_gguf_metadata

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.hf.tiny_hf import engine_greedy, hf_greedy, hf_logits  # noqa: E402
from tests.spec.test_spec_deepseek_mtp import (PROMPT, make_config, make_engine, save_tiny_deepseek,  # noqa: E402
                                               write_deepseek_gguf)

LOGIT_TOLERANCE = 1e-4
# DeepSeek-V3's rope_scaling but for the tiny model's context: rope dims 8 -> pair 0 keeps its frequency, pairs 1-2
# ramp, pair 3 is interpolated (original context 4096, beta 32 / 1)
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
                 "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
# mscale != mscale_all_dim: cos/sin scaled too (attention_factor = mscale(40, 1) / mscale(40, 0.7)); beta_fast 2
# moves the ramp to pairs 2-3 of the tiny model
SCALED_YARN = {**DEEPSEEK_YARN, "mscale_all_dim": 0.7, "beta_fast": 2.0, "original_max_position_embeddings": 2048}
KIMI_K2_YARN = {**DEEPSEEK_YARN, "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0}  # Kimi-K2's config.json


def hf_yarn(rope_parameters: dict, rope_dim: int, max_positions: int = 163840):
    import transformers as tf
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = tf.DeepseekV3Config(qk_rope_head_dim=rope_dim, max_position_embeddings=max_positions,
                                 rope_parameters=dict(rope_parameters))
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config)
    return inv_freq.double().numpy(), attention_factor


def ours_from_hf(rope_parameters: dict, max_positions: int = 163840) -> YarnRope:
    return yarn_from_gguf(yarn_gguf_metadata("deepseek2", rope_parameters, max_positions, "config.json"),
                          "deepseek2")


@pytest.mark.parametrize("params, rope_dim", [(DEEPSEEK_YARN, 64), (DEEPSEEK_YARN, 8), (SCALED_YARN, 64),
                                              (KIMI_K2_YARN, 64), ({**DEEPSEEK_YARN, "factor": None}, 64)])
def test_yarn_tables_match_transformers(params, rope_dim):
    """Real DeepSeek-V3 sizes (rope dims 64, factor 40 over 4096), Kimi-K2's (beta_fast = beta_slow: a step, not a
    ramp) and the tiny model's; factor None: HF derives it from max_position_embeddings / original context."""
    expected_inv_freq, expected_attention = hf_yarn(params, rope_dim)
    yarn = ours_from_hf(params)
    theta = params["rope_theta"]
    inv_freq = theta ** (-np.arange(0, rope_dim, 2) / rope_dim) / yarn.freq_factors(rope_dim, theta)
    np.testing.assert_allclose(inv_freq, expected_inv_freq, rtol=1e-6)
    assert yarn.attention_factor == pytest.approx(expected_attention, rel=1e-6)
    assert not np.allclose(yarn.freq_factors(rope_dim, theta), 1.0)


def test_softmax_scale_multiplier_is_deepseeks_mscale_squared():
    assert ours_from_hf(DEEPSEEK_YARN).softmax_scale_multiplier == pytest.approx((0.1 * np.log(40.0) + 1) ** 2)
    assert ours_from_hf({**DEEPSEEK_YARN, "mscale_all_dim": 0}).softmax_scale_multiplier == 1.0


def test_llama_cpp_keys_read_as_llama_cpp_reads_them():
    """yarn_log_multiplier is 0.1 * mscale_all_dim; without yarn_attn_factor cos/sin stay unscaled (deepseek2)."""
    p = "deepseek2.rope.scaling."
    yarn = yarn_from_gguf({p + "type": "yarn", p + "factor": 40.0, p + "original_context_length": 4096,
                           p + "yarn_log_multiplier": 0.0707}, "deepseek2")
    assert yarn.mscale_all_dim == pytest.approx(0.707) and yarn.attention_factor == 1.0
    assert (yarn.beta_fast, yarn.beta_slow) == (32.0, 1.0)
    assert yarn_from_gguf({p + "type": "none"}, "deepseek2") is None
    with pytest.raises(UnsupportedModelError, match="longrope"):
        yarn_from_gguf({p + "type": "longrope", p + "factor": 4.0}, "deepseek2")
    with pytest.raises(ModelFileError, match="original_context_length"):
        yarn_from_gguf({p + "type": "yarn", p + "factor": 4.0}, "deepseek2")
    with pytest.raises(UnsupportedModelError, match="truncate"):
        yarn_gguf_metadata("deepseek2", {**DEEPSEEK_YARN, "truncate": False}, 4096, "config.json")


@pytest.fixture(scope="module", params=["deepseek_yarn", "scaled_yarn"])
def yarn_checkpoint(request, tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    params = DEEPSEEK_YARN if request.param == "deepseek_yarn" else SCALED_YARN
    directory = tmp_path_factory.mktemp(request.param)
    return directory, save_tiny_deepseek(directory, make_config(params, max_position_embeddings=163840))


def test_yarn_checkpoint_matches_transformers(yarn_checkpoint):
    directory, reference = yarn_checkpoint
    engine = make_engine(directory)
    assert engine.model.yarn is not None
    long_prompt = PROMPT * 4  # positions up to 47: interpolated pairs turn far less than the original ones
    assert np.abs(engine.score(long_prompt) - hf_logits(reference, long_prompt)).max() < LOGIT_TOLERANCE


def test_yarn_greedy_decoding_matches_transformers(yarn_checkpoint):
    directory, reference = yarn_checkpoint
    assert engine_greedy(make_engine(directory), PROMPT, 12) == hf_greedy(reference, PROMPT, 12)


def test_yarn_gguf_with_llama_cpp_keys_matches_transformers(yarn_checkpoint, tmp_path):
    """llama.cpp's deepseek2 converter writes type, factor, original_context_length and yarn_log_multiplier only
    (cos/sin unscaled: mscale == mscale_all_dim; betas 32 / 1); other values travel in gguf-py's yarn_attn_factor,
    yarn_beta_fast and yarn_beta_slow keys."""
    directory, reference = yarn_checkpoint
    p = "deepseek2.rope.scaling."
    rope = reference.config.rope_parameters
    llama_cpp_style = rope["mscale"] == rope["mscale_all_dim"] and (rope["beta_fast"], rope["beta_slow"]) == (32, 1)
    skip = (p + "yarn_beta_fast", p + "yarn_beta_slow", p + "yarn_attn_factor") if llama_cpp_style else ()
    path = write_deepseek_gguf(directory, tmp_path / "yarn.gguf", skip_keys=skip)
    engine = make_engine(path)
    assert engine.model_file.metadata[p + "type"] == "yarn"
    assert all(key not in engine.model_file.metadata for key in skip)
    assert np.abs(engine.score(PROMPT) - hf_logits(reference, PROMPT)).max() < LOGIT_TOLERANCE


def test_released_deepseek_v3_config_maps_to_llama_cpp_keys():
    """DeepSeek-V3's own config.json (older rope_scaling form, `type` not `rope_type`) was refused before."""
    from gguf_loader.hf_config import hf_metadata

    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
              "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
              "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
              "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
              "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "n_shared_experts": 1,
              "routed_scaling_factor": 2.5, "first_k_dense_replace": 3, "max_position_embeddings": 163840,
              "rms_norm_eps": 1e-6, "rope_theta": 10000,
              "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                               "original_max_position_embeddings": 4096, "type": "yarn"}}
    meta = hf_metadata(config, "config.json")
    p = "deepseek2.rope.scaling."
    assert (meta[p + "type"], meta[p + "factor"], meta[p + "original_context_length"]) == ("yarn", 40.0, 4096)
    assert meta[p + "yarn_log_multiplier"] == pytest.approx(0.1) and meta[p + "yarn_attn_factor"] == 1.0
    yarn = yarn_from_gguf(meta, "deepseek2")
    assert yarn.correction_range(64, 10000.0) == (10, 23)
    assert yarn.softmax_scale_multiplier == pytest.approx(1.3689 ** 2, abs=1e-3)  # (1 + 0.1 ln 40)^2


def test_yarn_stays_refused_where_the_model_does_not_apply_it():
    from gguf_loader.hf_config import hf_metadata

    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "rope_theta": 10000.0,
              "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}
    with pytest.raises(UnsupportedModelError, match="'yarn' is not supported"):
        hf_metadata(config, "config.json")
