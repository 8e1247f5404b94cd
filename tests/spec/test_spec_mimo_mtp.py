"""MiMo MTP (`model.mtp_layers.*` of HF MiMo checkpoints): a tiny random Qwen2 saved by transformers plus one MTP
layer. The main model matches transformers, the MTP step matches a transcription built from transformers' own
Qwen2 layer, and `--spec mtp` greedy output is token-for-token plain greedy output, with the MTP's K/V cache
re-run over the accepted tokens."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.engine.sequence import Sequence  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import engine_greedy, hf_logits, save_tiny_model  # noqa: E402
from tests.spec.spec_checkpoints import add_mimo_mtp_layer  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
HIDDEN = 64
LOGIT_TOLERANCE = 1e-4  # float32 on both sides


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mimo")
    reference = save_tiny_model(root / "qwen2", "qwen2")
    return {"reference": reference, "mimo": add_mimo_mtp_layer(root / "qwen2", root / "mimo"),
            "echo": add_mimo_mtp_layer(root / "qwen2", root / "echo", echo=True)}


def make_engine(path, **kwargs) -> LLMEngine:
    return LLMEngine(EngineConfig(str(path), ctx_size=128, block_size=4, backend="reference", **kwargs))


def test_mimo_loads_its_mtp_layer_after_the_main_layers(dirs):
    engine = make_engine(dirs["mimo"])
    assert engine.hparams.arch == "mimo" and engine.hparams.num_layers == 4 and len(engine.model.layers) == 3
    (mtp,) = engine.model.mtp_layers
    assert mtp.layer_id == 3 and mtp.eh_proj.shape == (HIDDEN, 2 * HIDDEN)
    assert mtp.layer.bq is not None  # a Qwen2 block: q/k/v biases
    assert np.abs(engine.score(PROMPT) - hf_logits(dirs["reference"], PROMPT)).max() < LOGIT_TOLERANCE


def test_mimo_mtp_step_matches_transformers_parts(dirs):
    """MiMo's MTP (vLLM mimo_mtp): input_proj(cat[hidden_layernorm(H_p), token_layernorm(emb(t_{p+1}))]), the
    embedding zeroed at position 0 -> Qwen2 decoder layer -> final_layernorm -> lm_head, over a whole prompt."""
    import torch
    from safetensors.torch import load_file
    from transformers.models.qwen2 import modeling_qwen2 as q2

    from pocketcli.engine.speculative.mtp_drafter import MTPDrafter

    reference = dirs["reference"]
    weights = load_file(str(dirs["mimo"] / "model.safetensors"))
    config, prefix = reference.config, "model.mtp_layers.0."
    layer = q2.Qwen2DecoderLayer(config, layer_idx=0)
    own = ("input_proj", "token_layernorm", "hidden_layernorm", "final_layernorm")  # the rest: the decoder block
    layer.load_state_dict({k[len(prefix):]: v for k, v in weights.items()
                           if k.startswith(prefix) and not k[len(prefix):].startswith(own)})
    norms = {name: q2.Qwen2RMSNorm(HIDDEN, eps=config.rms_norm_eps) for name in
             ("token_layernorm", "hidden_layernorm", "final_layernorm")}
    for name, module in norms.items():
        module.weight.data.copy_(weights[f"{prefix}{name}.weight"])
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        hidden = reference.model(ids).last_hidden_state[0]  # post final norm
        embedded = reference.model.embed_tokens(ids[0, 1:])
        embedded[0] = 0  # position 0
        x = torch.cat([norms["hidden_layernorm"](hidden[:-1]), norms["token_layernorm"](embedded)], -1)
        x = (x @ weights[prefix + "input_proj.weight"].T)[None]
        positions = torch.arange(len(PROMPT) - 1)[None]
        mask = torch.full((len(PROMPT) - 1,) * 2, float("-inf")).triu(1)[None, None]
        x = layer(x, position_embeddings=reference.model.rotary_emb(x, positions), attention_mask=mask)
        expected = reference.lm_head(norms["final_layernorm"](x))[0].numpy()

    engine = make_engine(dirs["mimo"])
    drafter = MTPDrafter(engine)
    seq = Sequence(PROMPT, SamplingParams(), engine.config.block_size)
    logits, _ = drafter._step(drafter._context(seq), np.asarray(PROMPT[1:]), hidden[:-1].numpy(),
                              np.arange(len(PROMPT) - 1))
    assert np.abs(logits - expected).max() < LOGIT_TOLERANCE


@pytest.mark.parametrize("variant", ["mimo", "echo"])
def test_mimo_mtp_speculation_is_lossless(dirs, variant):
    expected = engine_greedy(make_engine(dirs[variant]), PROMPT, 24)
    engine = make_engine(dirs[variant], spec="mtp", spec_k=3)
    assert engine_greedy(engine, PROMPT, 24) == expected
    stats = engine.speculative.stats
    assert stats.num_draft_tokens > 0
    drafted_once = stats.num_draft_tokens
    assert engine_greedy(engine, PROMPT, 24) == expected  # the same prompt again: no prefix-cache gap stops drafting
    assert stats.num_draft_tokens == 2 * drafted_once
    if variant == "echo":
        assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens  # both outcomes were exercised


def test_mimo_mtp_cache_holds_verified_pairs_only(dirs):
    """After speculative rounds, the MTP's K/V of every verified position equal those of one fresh catch-up
    over the final tokens with the target's hidden states: entries written from drafted tokens or from the
    MTP's own hidden were replaced by re-running the MTP over the accepted tokens."""
    from pocketcli.engine.speculative.mtp_drafter import MTPDrafter

    engine = make_engine(dirs["echo"], spec="mtp", spec_k=3)
    seq = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    for _ in range(12):
        engine.step()
    assert not seq.is_finished and engine.speculative.stats.num_accepted_tokens > 0
    drafter = engine.speculative.drafter
    ctx = drafter.contexts[seq.seq_id]
    num_paired = ctx.num_paired

    engine.score(seq.token_ids[:num_paired])  # the target over the verified tokens, taps on: H_0 .. H_{n-1}
    (tapped,) = [engine.model.tapped_hidden[layer] for layer in drafter.tap_layer_ids]
    target_hidden = engine.model.ops.rms_norm(tapped, engine.model.output_norm, engine.hparams.rms_norm_eps)
    fresh = MTPDrafter(engine)
    fresh_ctx = fresh._context(seq)
    fresh._step(fresh_ctx, np.asarray(seq.token_ids[1:num_paired + 1]), target_hidden, np.arange(num_paired))

    def rows(keys):
        return keys.reshape(-1, *keys.shape[2:])[:num_paired]  # [positions, KVH, hd]

    assert np.abs(rows(ctx.keys) - rows(fresh_ctx.keys)).max() < 1e-4
    assert np.abs(rows(ctx.values) - rows(fresh_ctx.values)).max() < 1e-4


def test_cli_generate_with_mimo_mtp(dirs, capsys):
    from pocketcli.cli import main

    def generate(*spec):
        code = main(["generate", "-m", str(dirs["echo"]), "-p", "hello world, hello tokens", "-n", "16",
                     "--temp", "0", "--ignore-eos", "--json", *spec])
        assert code == 0
        return json.loads(capsys.readouterr().out)

    plain, speculative = generate(), generate("--spec", "mtp", "--spec-k", "2")
    assert speculative["text"] == plain["text"]
    assert speculative["speculative"]["method"] == "mtp" and speculative["speculative"]["draft_tokens"] > 0
