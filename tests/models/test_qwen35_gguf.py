"""Qwen3.5 from a GGUF laid out as llama.cpp's converter writes it (norms stored as w + 1, ssm_a = -exp(A_log),
value heads reordered from grouped to tiled) against transformers on the same weights."""
import gguf
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from tests.hf.tiny_hf import hf_logits  # noqa: E402
from tests.hf.tiny_qwen_next_hf import DELTANET, make_model, single_torch_thread, state_dict_numpy  # noqa: E402
from tests.models.tiny_gguf import TINY_CONFIGS, _add_vocab, finish_gguf  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
single_torch_thread = pytest.fixture(scope="module", autouse=True)(single_torch_thread)
NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
         "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
         "linear_attn.in_proj_qkv": "attn_qkv", "linear_attn.in_proj_z": "attn_gate",
         "linear_attn.in_proj_b": "ssm_beta", "linear_attn.in_proj_a": "ssm_alpha",
         "linear_attn.conv1d": "ssm_conv1d", "linear_attn.out_proj": "ssm_out", "linear_attn.norm": "ssm_norm"}


def tiled(array: np.ndarray, axis: int) -> np.ndarray:
    """Value heads from grouped (g * r + i) to tiled (i * H_k + g) order along `axis` (llama.cpp's converter)."""
    key_heads, value_heads = DELTANET["linear_num_key_heads"], DELTANET["linear_num_value_heads"]
    ratio = value_heads // key_heads
    order = [g * ratio + i for i in range(ratio) for g in range(key_heads)]
    heads = np.split(array, value_heads, axis=axis)
    return np.concatenate([heads[j] for j in order], axis=axis)


def convert(name: str, array: np.ndarray) -> tuple[str, np.ndarray]:
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return {"model.embed_tokens.weight": "token_embd", "lm_head.weight": "output"}[name] + ".weight", array
    if name == "model.norm.weight":
        return "output_norm.weight", array + 1
    _, _, layer, rest = name.split(".", 3)
    key_width = DELTANET["linear_num_key_heads"] * DELTANET["linear_key_head_dim"]
    dv = DELTANET["linear_value_head_dim"]
    if rest == "linear_attn.A_log":
        return f"blk.{layer}.ssm_a", tiled(-np.exp(array), 0)
    if rest == "linear_attn.dt_bias":
        return f"blk.{layer}.ssm_dt.bias", tiled(array, 0)
    module = rest.removesuffix(".weight")
    if module == "linear_attn.conv1d":
        array = array.reshape(array.shape[0], -1)
    if module in ("linear_attn.in_proj_qkv", "linear_attn.conv1d"):
        array = np.concatenate([array[:2 * key_width], tiled(array[2 * key_width:], 0)])
    elif module in ("linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a"):
        array = tiled(array, 0)
    elif module == "linear_attn.out_proj":
        array = tiled(array, 1)
    elif module.endswith("norm") and module != "linear_attn.norm":
        array = array + 1
    return f"blk.{layer}.{NAMES[module]}.weight", array


def write_gguf(path, model):
    c = model.config
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_context_length(128)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_key_length(c.head_dim)
    writer.add_value_length(c.head_dim)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(int(c.head_dim * c.rope_parameters["partial_rotary_factor"]))
    writer.add_ssm_conv_kernel(c.linear_conv_kernel_dim)
    writer.add_ssm_state_size(c.linear_key_head_dim)
    writer.add_ssm_group_count(c.linear_num_key_heads)
    writer.add_ssm_time_step_rank(c.linear_num_value_heads)
    writer.add_ssm_inner_size(c.linear_num_value_heads * c.linear_value_head_dim)
    writer.add_full_attention_interval(4)
    _add_vocab(writer, TINY_CONFIGS["qwen3"])
    for name, array in state_dict_numpy(model).items():
        ours, converted = convert(name, array)
        writer.add_tensor(ours, np.ascontiguousarray(converted, dtype=np.float32))
    finish_gguf(writer)
    return path


def test_qwen35_gguf_matches_transformers(tmp_path):
    model = make_model("qwen35")
    engine = LLMEngine(EngineConfig(str(write_gguf(tmp_path / "q35.gguf", model)), ctx_size=128,
                                    backend="reference"))
    assert not engine.hparams.extra["ssm_value_heads_grouped"]  # llama.cpp's tiled value heads
    assert np.abs(engine.score(PROMPT) - hf_logits(model, PROMPT)).max() < 1e-4
