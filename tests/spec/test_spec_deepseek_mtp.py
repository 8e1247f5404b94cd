"""DeepSeek-V3 (MLA attention, sigmoid group-limited routing, shared experts, leading dense layer) from a tiny
random HF checkpoint saved by transformers, against DeepseekV3ForCausalLM; then its `nextn` MTP layer
(model.layers.{num_hidden_layers}.*: enorm, hnorm, eh_proj, shared_head, a DeepSeek block): the MTP step matches a
transcription built from transformers' own DeepSeek-V3 layer, and `--spec mtp` greedy output is plain greedy."""
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.engine.sequence import Sequence  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import engine_greedy, hf_logits, make_tokenizer_files  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
HIDDEN, LAYERS = 64, 3
LOGIT_TOLERANCE = 1e-4


DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def make_config(rope_parameters=None, max_position_embeddings=128):
    import transformers as tf

    return tf.DeepseekV3Config(
        vocab_size=320, hidden_size=HIDDEN, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=LAYERS,
        first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        n_shared_experts=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, routed_scaling_factor=2.5, norm_topk_prob=True,
        max_position_embeddings=max_position_embeddings, rope_parameters=rope_parameters or DEFAULT_ROPE,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0, num_nextn_predict_layers=1)


def save_tiny_deepseek(directory, config=None):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = config or make_config()
    config._attn_implementation = "eager"
    model = tf.DeepseekV3ForCausalLM(config)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + 1.0 if p.ndim == 1 else torch.randn_like(p) / p.shape[-1] ** 0.5)
        for layer in model.model.layers[config.first_k_dense_replace:]:
            bias = layer.mlp.gate.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape) * 0.1)
    model.eval().save_pretrained(directory)
    make_tokenizer_files(directory)
    return model


def add_nextn_layer(source, target):
    """The checkpoint plus model.layers.3.* (DeepSeek-V3's MTP layer, which transformers does not load): a perturbed
    copy of the MoE layer 2 plus enorm, hnorm, eh_proj and shared_head (head = a copy of lm_head)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(source, target)
    tensors = load_file(str(target / "model.safetensors"))
    rng = np.random.default_rng(9)
    last, mtp = f"model.layers.{LAYERS - 1}.", f"model.layers.{LAYERS}."
    tensors.update({mtp + name[len(last):]: array + rng.normal(0, 0.05, array.shape).astype(np.float32)
                    for name, array in list(tensors.items()) if name.startswith(last)})
    eh_proj = rng.normal(0, (2 * HIDDEN) ** -0.5, (HIDDEN, 2 * HIDDEN)).astype(np.float32)
    tensors.update({mtp + "eh_proj.weight": eh_proj,
                    mtp + "enorm.weight": (1 + rng.normal(0, 0.1, HIDDEN)).astype(np.float32),
                    mtp + "hnorm.weight": (1 + rng.normal(0, 0.1, HIDDEN)).astype(np.float32),
                    mtp + "shared_head.norm.weight": (1 + rng.normal(0, 0.1, HIDDEN)).astype(np.float32),
                    mtp + "shared_head.head.weight": tensors["lm_head.weight"].copy(),
                    mtp + "embed_tokens.weight": tensors["model.embed_tokens.weight"].copy()})
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("deepseek")
    reference = save_tiny_deepseek(root / "dsv3")
    return {"reference": reference, "dsv3": root / "dsv3", "mtp": add_nextn_layer(root / "dsv3", root / "mtp")}


def make_engine(path, backend="reference", **kwargs) -> LLMEngine:
    return LLMEngine(EngineConfig(str(path), ctx_size=128, block_size=4, backend=backend, **kwargs))


def test_deepseek_v3_matches_transformers(dirs):
    engine = make_engine(dirs["dsv3"])
    assert engine.hparams.arch == "deepseek2" and not engine.model.mtp_layers
    assert np.abs(engine.score(PROMPT) - hf_logits(dirs["reference"], PROMPT)).max() < LOGIT_TOLERANCE


def test_deepseek_v3_greedy_decoding_matches_transformers(dirs):
    import torch

    out = list(PROMPT)
    with torch.no_grad():
        for _ in range(12):
            out.append(int(dirs["reference"](torch.tensor([out])).logits[0, -1].argmax()))
    assert engine_greedy(make_engine(dirs["dsv3"]), PROMPT, 12) == out[len(PROMPT):]


def test_nextn_layer_loads_after_the_main_layers(dirs):
    engine = make_engine(dirs["mtp"])
    assert engine.hparams.num_layers == LAYERS + 1 and len(engine.model.layers) == LAYERS
    (mtp,) = engine.model.mtp_layers
    assert mtp.layer_id == LAYERS and mtp.eh_proj.shape == (HIDDEN, 2 * HIDDEN) and mtp.layer.experts is not None
    assert np.abs(engine.score(PROMPT) - hf_logits(dirs["reference"], PROMPT)).max() < LOGIT_TOLERANCE


def test_nextn_step_matches_transformers_parts(dirs):
    """eh_proj(cat[enorm(emb(t_{p+1})), hnorm(H_p)]), embedding zeroed at position 0 -> DeepSeek-V3 decoder layer
    -> shared_head.norm -> head, with transformers' DeepseekV3DecoderLayer on the same weights."""
    import torch
    from safetensors.torch import load_file
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    reference = dirs["reference"]
    weights = load_file(str(dirs["mtp"] / "model.safetensors"))
    prefix = f"model.layers.{LAYERS}."
    own = ("enorm", "hnorm", "eh_proj", "shared_head", "embed_tokens")
    layer = ds.DeepseekV3DecoderLayer(reference.config, layer_idx=LAYERS - 1)  # a MoE layer
    state = {k[len(prefix):]: v for k, v in weights.items()
             if k.startswith(prefix) and not k[len(prefix):].startswith(own)}
    experts = range(8)  # transformers keeps the experts fused: gate_up_proj [E, 2I, D] (gate rows first), down_proj
    state["mlp.experts.gate_up_proj"] = torch.stack([torch.cat([state.pop(f"mlp.experts.{e}.gate_proj.weight"),
                                                                state.pop(f"mlp.experts.{e}.up_proj.weight")])
                                                     for e in experts])
    state["mlp.experts.down_proj"] = torch.stack([state.pop(f"mlp.experts.{e}.down_proj.weight") for e in experts])
    layer.load_state_dict(state)
    norms = {name: ds.DeepseekV3RMSNorm(HIDDEN, eps=reference.config.rms_norm_eps)
             for name in ("enorm", "hnorm", "head")}
    for name, key in (("enorm", "enorm"), ("hnorm", "hnorm"), ("head", "shared_head.norm")):
        norms[name].weight.data.copy_(weights[f"{prefix}{key}.weight"])
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        hidden = reference.model(ids).last_hidden_state[0]  # post final norm
        embedded = reference.model.embed_tokens(ids[0, 1:])
        embedded[0] = 0
        x = torch.cat([norms["enorm"](embedded), norms["hnorm"](hidden[:-1])], -1)
        x = (x @ weights[prefix + "eh_proj.weight"].T)[None]
        positions = torch.arange(len(PROMPT) - 1)[None]
        mask = torch.full((len(PROMPT) - 1,) * 2, float("-inf")).triu(1)[None, None]
        x = layer(x, position_embeddings=reference.model.rotary_emb(x, positions), attention_mask=mask)
        expected = (norms["head"](x) @ weights[prefix + "shared_head.head.weight"].T)[0].numpy()

    from pocketcli.engine.speculative.mtp_drafter import MTPDrafter

    engine = make_engine(dirs["mtp"])
    drafter = MTPDrafter(engine)
    seq = Sequence(PROMPT, SamplingParams(), engine.config.block_size)
    logits, _ = drafter._step(drafter._context(seq), np.asarray(PROMPT[1:]), hidden[:-1].numpy(),
                              np.arange(len(PROMPT) - 1))
    assert np.abs(logits - expected).max() < LOGIT_TOLERANCE


def test_nextn_speculation_is_lossless(dirs):
    expected = engine_greedy(make_engine(dirs["mtp"]), PROMPT, 20)
    engine = make_engine(dirs["mtp"], spec="mtp", spec_k=2)
    assert engine_greedy(engine, PROMPT, 20) == expected
    assert engine.speculative.stats.num_draft_tokens > 0


def write_deepseek_gguf(hf_dir, path, skip_keys=(), split_kv_b=False):
    """The HF checkpoint as a deepseek2 GGUF in llama.cpp's names (attn_kv_b form, blk.N.nextn.* for the MTP
    layer, as gguf-py's NEXTN_* tensors name it), with a 320-token SentencePiece vocabulary; `skip_keys`: metadata
    left out (keys llama.cpp's converter does not write); split_kv_b: llama.cpp's MLA form (split_mla_kv_b)."""
    import gguf

    from gguf_loader.hf_checkpoint import HFCheckpoint
    from tests.models.tiny_gguf import TINY_CONFIGS, _add_vocab, finish_gguf

    checkpoint = HFCheckpoint(hf_dir)
    writer = gguf.GGUFWriter(str(path), "deepseek2")
    metadata, tensors = checkpoint.metadata, {name: checkpoint.dequantized(name) for name in checkpoint.tensor_infos}
    if split_kv_b:
        metadata, tensors = split_mla_kv_b(metadata, tensors)
    for key, value in metadata.items():
        if not key.startswith("deepseek2.") or key in skip_keys:
            continue
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
    _add_vocab(writer, TINY_CONFIGS["llama"])
    for name, array in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    finish_gguf(writer)
    return str(path)


def split_mla_kv_b(metadata: dict, tensors: dict) -> tuple[dict, dict]:
    """As llama.cpp's DeepseekV2 converter writes MLA: one KV head of key_length kv_lora + rope and value_length
    kv_lora, the per-head sizes under key_length_mla / value_length_mla, and attn_kv_b split per head into
    attn_k_b [H, kv_lora, nope] (transposed) and attn_v_b [H, v, kv_lora]."""
    p = "deepseek2.attention."
    heads, kv_lora = metadata[p + "head_count"], metadata[p + "kv_lora_rank"]
    rope = metadata["deepseek2.rope.dimension_count"]
    nope, value = metadata[p + "key_length"] - rope, metadata[p + "value_length"]
    metadata = {**metadata, p + "head_count_kv": 1, p + "key_length": kv_lora + rope, p + "value_length": kv_lora,
                p + "key_length_mla": nope + rope, p + "value_length_mla": value}
    split = {}
    for name, array in tensors.items():
        if not name.endswith("attn_kv_b.weight"):
            split[name] = array
            continue
        per_head = array.reshape(heads, nope + value, kv_lora)
        split[name.replace("attn_kv_b", "attn_k_b")] = per_head[:, :nope].transpose(0, 2, 1)
        split[name.replace("attn_kv_b", "attn_v_b")] = per_head[:, nope:]
    return metadata, split


def test_gguf_with_nextn_tensors_drafts_losslessly(dirs, tmp_path):
    path = write_deepseek_gguf(dirs["mtp"], tmp_path / "dsv3_mtp.gguf")
    engine = make_engine(path)
    assert engine.model_file.has_tensor(f"blk.{LAYERS}.nextn.eh_proj.weight") and len(engine.model.mtp_layers) == 1
    assert np.abs(engine.score(PROMPT) - hf_logits(dirs["reference"], PROMPT)).max() < LOGIT_TOLERANCE
    expected = engine_greedy(engine, PROMPT, 16)
    speculative = make_engine(path, spec="mtp", spec_k=2)
    assert engine_greedy(speculative, PROMPT, 16) == expected
    assert speculative.speculative.stats.num_draft_tokens > 0
