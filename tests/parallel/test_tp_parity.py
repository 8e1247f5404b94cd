"""--tp 2 and --tp 4 on CPU ranks against --tp 1: greedy tokens identical, logits within float32 tolerance,
for every architecture on tiny random models, batched (2 sequences) and with n-gram speculative decoding."""
from __future__ import annotations

import pytest

from tests.models.tiny_gguf import write_tiny_model
from tests.parallel.tiny_moe_gguf import write_tiny_moe
from tests.parallel.tp_engines import assert_same_outputs, greedy_batch, make_engine, run_checks

PROMPTS = [[1, 40, 50, 60, 70, 80, 90], [1, 300, 21, 22]]
MAX_TOKENS = 10
LOGITS_ATOL = 1e-4  # partial sums added in another order: float32 rounding only


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp_models")
    paths = {arch: write_tiny_model(root / f"{arch}.gguf", arch, 0, "F32") for arch in
             ("llama", "qwen2", "qwen3", "gemma3")}
    paths["qwen3_q4_0"] = write_tiny_model(root / "qwen3_q4_0.gguf", "qwen3", 0, "Q4_0")
    paths["llama_q8_0"] = write_tiny_model(root / "llama_q8_0.gguf", "llama", 0, "Q8_0")
    paths["qwen3moe"] = write_tiny_moe(root / "qwen3moe.gguf")
    return paths


@pytest.fixture(scope="module")
def references(models):
    return {name: run_checks(path, 1, PROMPTS, MAX_TOKENS) for name, path in models.items()}


@pytest.mark.parametrize("name, tp_size", [
    ("llama", 2), ("llama", 4), ("qwen2", 2), ("qwen2", 4), ("qwen3", 2), ("qwen3", 4), ("gemma3", 2),
    ("gemma3", 4), ("qwen3moe", 2), ("qwen3moe", 4), ("qwen3_q4_0", 4), ("llama_q8_0", 2)])
def test_tp_matches_single_rank(models, references, name, tp_size):
    assert_same_outputs(run_checks(models[name], tp_size, PROMPTS, MAX_TOKENS), references[name], LOGITS_ATOL,
                        rounds_activations=name.endswith(("_q4_0", "_q8_0")))


def test_ngram_speculation_under_tp(models, references):
    """A prompt that repeats itself, so the n-gram drafter proposes and the TP verifier accepts some."""
    prompt = [1, 40, 50, 60, 70, 40, 50, 60, 70, 40, 50, 60]
    plain = greedy_batch_closed(models["gemma3"], 1, [prompt])
    engine = make_engine(models["gemma3"], 2, spec="ngram", spec_k=4)
    try:
        assert greedy_batch(engine, [prompt], MAX_TOKENS) == plain
        assert engine.speculative.stats.num_draft_tokens > 0
    finally:
        engine.close()


def test_draft_model_speculation_under_tp(models):
    """The drafter is an ordinary single-rank engine in rank 0's process; the target verifies over 2 ranks."""
    plain = greedy_batch_closed(models["llama"], 1, PROMPTS)
    engine = make_engine(models["llama"], 2, spec="draft", draft_model_path=str(models["llama"]), spec_k=3)
    try:
        assert greedy_batch(engine, PROMPTS, MAX_TOKENS) == plain
    finally:
        engine.close()


def greedy_batch_closed(path, tp_size, prompts):
    engine = make_engine(path, tp_size)
    try:
        return greedy_batch(engine, prompts, MAX_TOKENS)
    finally:
        engine.close()
