"""A tiny GGUF model generates the same greedy tokens on the (simulated) GPU as on the CPU."""
import dataclasses

import numpy as np
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_params import SamplingParams
from tests.models import tiny_gguf

PROMPT = [1, 40, 41, 42, 43]
NEW_TOKENS = 4


def greedy_tokens(path, backend):
    engine = LLMEngine(EngineConfig(str(path), ctx_size=32, backend=backend, block_size=4))
    seq = engine.add_request(list(PROMPT), SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS))
    tokens = []
    while engine.has_unfinished():
        tokens += [t for out in engine.step() if out.seq_id == seq.seq_id for t in out.new_token_ids]
    return tokens, engine


@pytest.fixture
def smaller_gemma3(monkeypatch):
    """Gemma 3 at the smallest size the tiny writer allows (simulated threads are slow; 264 = its specials and
    byte tokens, then 5 pieces): two sliding layers (window 3), q/k norms, post norms, GELU, scaled and tied
    embeddings."""
    config = dataclasses.replace(tiny_gguf.TINY_CONFIGS["gemma3"], n_layer=2, n_embd=32, n_head=2, n_head_kv=1,
                                 head_dim=32, n_ff=32, n_vocab=264, sliding_window=3)
    monkeypatch.setitem(tiny_gguf.TINY_CONFIGS, "gemma3", config)


def test_greedy_tokens_match_the_cpu_through_the_engine_and_a_captured_step(tmp_path, smaller_gemma3):
    """Prefill and a decode through the engine (ops=cuda), then decodes through CapturedStep (a CUDA graph on a
    GPU; the step run eagerly on the same input buffers under the simulator): the tokens are the CPU's."""
    from kernels_numba.cuda.decode_graph import CapturedStep
    from kernels_numba.cuda.sampler import top_k_on_device
    from pocketcli.models.attn_metadata import AttnMetadata

    # seed 10: four different tokens, so a step that reused the previous step's inputs or output would show
    path = tiny_gguf.write_tiny_model(tmp_path / "gemma3.gguf", "gemma3", seed=10, quant="Q8_0")
    cpu_tokens, _ = greedy_tokens(path, "reference")  # the CPU kernels' oracle: no numba compile in this suite
    engine = LLMEngine(EngineConfig(str(path), ctx_size=32, backend="cuda", block_size=4))
    seq = engine.add_request(list(PROMPT), SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS))
    tokens = [t for _ in range(2) for out in engine.step() for t in out.new_token_ids]  # prefill, one decode
    assert engine.model.ops.uploaded_bytes() > 0  # the weights went to the device, once
    model, kv, table = engine.model, engine.kv_cache, np.asarray(seq.block_table, np.int32)
    model.keep_on_device = True

    def step(inputs):
        attn = AttnMetadata(inputs["slots"], inputs["tables"], inputs["lens"], inputs["starts"])
        hidden = model.forward(inputs["tokens"], inputs["positions"], attn, kv.keys, kv.values)
        return top_k_on_device(model.compute_logits(hidden), 1)[1]

    shapes = {"tokens": ((1,), np.int64), "positions": ((1,), np.int64), "slots": ((1,), np.int64),
              "tables": ((1, len(table)), np.int32), "lens": ((1,), np.int32), "starts": ((2,), np.int32)}
    captured = CapturedStep(step, shapes)
    for position in range(len(PROMPT) + 1, len(PROMPT) + NEW_TOKENS - 1):  # after the engine's decode at len(PROMPT)
        inputs = {"tokens": [tokens[-1]], "positions": [position], "lens": [position + 1], "starts": [0, 1],
                  "slots": [table[position // 4] * 4 + position % 4], "tables": table[None]}
        if captured.output is None:  # the first step captures (and warms up on these inputs)
            captured.write_inputs(inputs)
            output = captured.replay(inputs) if captured.capture() else captured.output
        else:
            output = captured.replay(inputs)
        tokens.append(int(output.copy_to_host()[0, 0]))
    assert tokens == cpu_tokens and len(set(tokens)) == NEW_TOKENS
