"""Qwen3-MoE from a GGUF written with the `gguf` package (llama.cpp's names, 3-D stacked experts) against
transformers on the same weights; the quantized expert path (Q8_0) of the numba backend against the reference."""
import gguf
import numpy as np
import pytest

from kernels_numba.cpu.matvec.dispatch import USE_INT8_DOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import hf_logits  # noqa: E402
from tests.hf.tiny_qwen_next_hf import (hf_greedy_cached, make_model, single_torch_thread,  # noqa: E402
                                         state_dict_numpy)
from tests.models.tiny_gguf import TINY_CONFIGS, _add_vocab, finish_gguf  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
single_torch_thread = pytest.fixture(scope="module", autouse=True)(single_torch_thread)
LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp"}


def gguf_tensors(model) -> dict[str, np.ndarray]:
    """llama.cpp's qwen3moe tensors from the transformers model (experts split from gate_up_proj, stacked)."""
    out = {}
    for name, array in state_dict_numpy(model).items():
        if name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            out[{"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm",
                 "lm_head.weight": "output"}[name] + ".weight"] = array
            continue
        _, _, layer, rest = name.split(".", 3)
        if rest == "mlp.experts.gate_up_proj":  # [E, 2I, D]: gate rows then up rows
            half = array.shape[1] // 2
            out[f"blk.{layer}.ffn_gate_exps.weight"] = array[:, :half]
            out[f"blk.{layer}.ffn_up_exps.weight"] = array[:, half:]
        elif rest == "mlp.experts.down_proj":
            out[f"blk.{layer}.ffn_down_exps.weight"] = array
        else:
            out[f"blk.{layer}.{LAYER_NAMES[rest.removesuffix('.weight')]}.weight"] = array
    return out


def write_gguf(path, model, expert_type=gguf.GGMLQuantizationType.F32):
    config = model.config
    writer = gguf.GGUFWriter(str(path), "qwen3moe")
    writer.add_context_length(128)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_expert_count(config.num_local_experts)
    writer.add_expert_used_count(config.num_experts_per_tok)
    writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    _add_vocab(writer, TINY_CONFIGS["qwen3"])
    for name, array in gguf_tensors(model).items():
        array = np.ascontiguousarray(array, dtype=np.float32)
        if "_exps" in name and expert_type != gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, gguf.quants.quantize(array, expert_type), raw_dtype=expert_type)
        else:
            writer.add_tensor(name, array)
    finish_gguf(writer)
    return path


@pytest.fixture(scope="module")
def reference_model():
    return make_model("qwen3moe")


def test_gguf_matches_transformers(reference_model, tmp_path):
    engine = LLMEngine(EngineConfig(str(write_gguf(tmp_path / "moe.gguf", reference_model)), ctx_size=128,
                                    backend="reference"))
    experts = engine.model.layers[0].experts
    assert experts.gate.shape == (8, 32, 64) and experts.down.shape == (8, 64, 32) and experts.top_k == 3
    assert np.abs(engine.score(PROMPT) - hf_logits(reference_model, PROMPT)).max() < 1e-4
    seq = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    assert seq.token_ids[len(PROMPT):] == hf_greedy_cached(reference_model, PROMPT, 32)


def test_quantized_experts_cpu_matches_reference(reference_model, tmp_path):
    path = str(write_gguf(tmp_path / "moe_q8.gguf", reference_model, gguf.GGMLQuantizationType.Q8_0))
    engines = [LLMEngine(EngineConfig(path, ctx_size=128, backend=b)) for b in ("reference", "cpu")]
    assert engines[1].model.layers[2].experts.up.type_name == "Q8_0"
    cpu_logits, reference_logits = engines[1].score(PROMPT), engines[0].score(PROMPT)
    # the CPU's Q8_0 mat-vecs round activations to 8 bits where it has VNNI (int8_dot.py), as llama.cpp does
    np.testing.assert_allclose(cpu_logits, reference_logits, atol=0.1 if USE_INT8_DOT else 1e-4, rtol=0)
    top_two = np.sort(reference_logits, axis=-1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 0.2  # not a near-tie
    assert clear.sum() >= len(PROMPT) // 2
    assert (cpu_logits.argmax(-1) == reference_logits.argmax(-1))[clear].all()
