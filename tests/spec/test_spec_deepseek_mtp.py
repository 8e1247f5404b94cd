"""DeepSeek-V3 (MLA attention, sigmoid group-limited routing, shared experts, leading dense layer) from a tiny
random HF checkpoint saved by transformers, against DeepseekV3ForCausalLM; then its `nextn` MTP layer
(model.layers.{num_hidden_layers}.*: enorm, hnorm, eh_proj, shared_head, a DeepSeek block): the MTP step matches a
transcription built from transformers' own DeepSeek-V3 layer, and `--spec mtp` greedy output is plain greedy."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.engine.sequence import Sequence  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import engine_greedy, hf_logits  # noqa: E402
from tests.spec.spec_checkpoints import DEEPSEEK_HIDDEN as HIDDEN, DEEPSEEK_LAYERS as LAYERS  # noqa: E402
from tests.spec.spec_checkpoints import DEFAULT_ROPE, add_nextn_layer, save_tiny_deepseek  # noqa: E402,F401
from tests.spec.spec_checkpoints import make_deepseek_config as make_config  # noqa: E402,F401

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
LOGIT_TOLERANCE = 1e-4


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
