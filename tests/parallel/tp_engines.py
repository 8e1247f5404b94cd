"""Engines at --tp 1 and --tp N on the same file, and what the parity tests compare between them."""
from __future__ import annotations

import numpy as np

from kernels_numba.cpu.matvec.dispatch import USE_INT8_DOT

from pocketcli import engine_factory
from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_params import SamplingParams


def make_engine(path, tp_size: int, **config) -> LLMEngine:
    return engine_factory.make_engine(EngineConfig(model_path=str(path), ctx_size=config.pop("ctx_size", 128),
                                                   tp_size=tp_size, max_num_seqs=config.pop("max_num_seqs", 2),
                                                   **config))


def greedy_batch(engine: LLMEngine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy continuations of all prompts, decoded together in one batch."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    seqs = [engine.add_request(prompt, params) for prompt in prompts]
    while engine.has_unfinished():
        engine.step()
    return [seq.token_ids[len(prompt):] for seq, prompt in zip(seqs, prompts)]


def run_checks(path, tp_size: int, prompts, max_tokens: int, **config) -> dict:
    """Greedy tokens of the prompts batched and of the first alone (one-token decode steps: a CPU backend's
    fused-layer path), and teacher-forced logits of the first prompt; then the engine is closed."""
    engine = make_engine(path, tp_size, **config)
    try:
        return {"batched": greedy_batch(engine, prompts, max_tokens),
                "alone": greedy_batch(engine, prompts[:1], max_tokens), "logits": engine.score(prompts[0])}
    finally:
        engine.close()


# With 8-bit activations (kernels_numba/cpu/matvec/int8_dot.py, quantized GGUF weights on a VNNI CPU) a partial sum
# rounded ~1e-6 differently by the all-reduce can tip one activation across a step of its 8-bit grid (max/127 of
# its block of 32), which later layers spread: measured max 0.62 / mean 0.078 on the default model's logits at
# --tp 2 (the rounding itself puts them max 1.2 / mean ~0.15 from exact math: tests/models/test_default_model.py).
ROUNDED_LOGITS_MAX = 1.0
ROUNDED_LOGITS_MEAN = 0.15


def assert_same_outputs(result: dict, reference: dict, logits_atol: float, rounds_activations: bool = False) -> None:
    """Identical greedy tokens; logits within logits_atol (float32 sums in another order), or, where the CPU rounds
    activations to 8 bits (rounds_activations and int8 dots in use), within the rounding's own reach."""
    assert result["batched"] == reference["batched"]
    assert result["alone"] == reference["alone"]
    if rounds_activations and USE_INT8_DOT:
        difference = np.abs(np.asarray(result["logits"]) - np.asarray(reference["logits"]))
        assert difference.max() < ROUNDED_LOGITS_MAX and difference.mean() < ROUNDED_LOGITS_MEAN, (
            difference.max(), difference.mean())
        return
    np.testing.assert_allclose(result["logits"], reference["logits"], atol=logits_atol, rtol=0)
