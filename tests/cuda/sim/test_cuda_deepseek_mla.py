"""DeepSeek-V3's absorbed MLA and YaRN on the (simulated) GPU: the latent cache on the device, the per-head W_UK /
W_UV products through moe_linear, YaRN's host-side frequency factors and cos/sin scale through the rope kernel;
logits as transformers' and the reference backend's."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.hf.test_deepseek_yarn import SCALED_YARN  # noqa: E402
from tests.hf.tiny_hf import hf_logits  # noqa: E402
from tests.spec.test_spec_deepseek_mtp import make_engine, save_tiny_deepseek  # noqa: E402

PROMPT = [1, 17, 200, 45, 99]


def smaller_deepseek_config():
    """One dense layer at sizes the simulator can afford (every CUDA thread is a Python one; the routed experts
    run through the same moe_linear kernel that the per-head products use, tested in test_cuda_moe_deltanet)."""
    import transformers as tf

    return tf.DeepseekV3Config(
        vocab_size=320, hidden_size=32, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=1,
        first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
        n_shared_experts=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, routed_scaling_factor=2.5, norm_topk_prob=True,
        max_position_embeddings=163840, rope_parameters=SCALED_YARN, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2, pad_token_id=0)


def test_absorbed_yarn_logits_match_transformers_and_the_reference_backend(tmp_path):
    reference = save_tiny_deepseek(tmp_path, smaller_deepseek_config())
    engine = make_engine(tmp_path, backend="cuda")
    assert engine.model.absorbed and engine.model.yarn.attention_factor != 1.0
    assert engine.kv_cache.keys[0].shape[2:] == (1, 16 + 8)
    logits = engine.score(PROMPT)
    assert np.abs(logits - make_engine(tmp_path).score(PROMPT)).max() < 1e-4
    assert np.abs(logits - hf_logits(reference, PROMPT)).max() < 1e-4
