"""`--spec dflash` beside a target on the (simulated) GPU: the draft block's own math runs on the host, fed by the
target's device kernels (embedding, norms, rope, LM head), so it must take their device arrays back to numpy;
speculative greedy output equals plain greedy output, with the host backend's drafts. On a real GPU a device
array has no numpy methods (astype, slicing into np.concatenate): the simulator's arrays forgive that, hence
the explicit type checks."""
import dataclasses

import numpy as np

from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_params import SamplingParams
from tests.models import tiny_gguf
from tests.spec.spec_checkpoints import write_dflash_checkpoint

PROMPT = [1, 17, 20, 45, 9, 17, 20]  # ids below the smaller vocabulary; a repeat, so some drafts are accepted
NEW_TOKENS = 3  # the prefill's token, then draft-and-verify rounds (drafts stop short of max_tokens)


def greedy(target, backend, **spec):
    engine = LLMEngine(EngineConfig(str(target), ctx_size=32, block_size=4, backend=backend, **spec))
    seq = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return seq.token_ids[len(PROMPT):], engine


def test_dflash_beside_a_device_target_is_lossless_and_drafts_as_the_host(tmp_path, monkeypatch):
    """A 64-token vocabulary (every simulated launch costs ~0.1 s, and each 8 rows of a mat-vec two warp barriers)."""
    smaller = dataclasses.replace(tiny_gguf.TINY_CONFIGS["qwen3"], n_vocab=64, n_ff=64)
    monkeypatch.setitem(tiny_gguf.TINY_CONFIGS, "qwen3", smaller)
    target = tiny_gguf.write_tiny_model(tmp_path / "qwen3.gguf", "qwen3", seed=2)
    write_dflash_checkpoint(tmp_path / "dflash")
    spec = dict(spec="dflash", spec_k=2, draft_model_path=str(tmp_path / "dflash"))
    host_tokens, host = greedy(target, "reference", **spec)
    tokens, engine = greedy(target, "cuda", **spec)
    assert tokens == greedy(target, "reference")[0] == host_tokens
    stats, host_stats = engine.speculative.stats, host.speculative.stats
    assert stats.num_draft_tokens > 0
    assert (stats.num_draft_tokens, stats.num_accepted_tokens) == (host_stats.num_draft_tokens,
                                                                   host_stats.num_accepted_tokens)
    model = engine.speculative.drafter.model
    block = np.array([PROMPT[-1]] + [model.config.mask_token_id] * (model.config.block_size - 1))
    positions = np.arange(len(PROMPT) - 1, len(PROMPT) - 1 + model.config.block_size)
    empty_kv = [(np.zeros((0, model.config.num_kv_heads, model.config.head_dim), np.float32),) * 2
                for _ in model.layers]
    assert type(model.draft_logits(block, positions, empty_kv)) is np.ndarray
