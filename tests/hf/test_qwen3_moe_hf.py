"""Qwen3-MoE from a Hugging Face directory against transformers on the same tiny random weights."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from tests.hf.tiny_hf import engine_greedy, hf_logits  # noqa: E402
from tests.hf.tiny_qwen_next_hf import hf_greedy_cached, save_tiny_model, single_torch_thread  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
single_torch_thread = pytest.fixture(scope="module", autouse=True)(single_torch_thread)
GREEDY_STEPS = 32
LOGIT_TOLERANCE = 1e-4  # float32 on both sides (measured ~3e-6)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3moe")
    return path, save_tiny_model(path, "qwen3moe")


def test_qwen3_moe_matches_transformers(moe_dir):
    path, reference = moe_dir
    engine = LLMEngine(EngineConfig(str(path), ctx_size=128, backend="reference"))
    layers = engine.model.layers
    assert layers[0].experts is not None and getattr(layers[1], "experts", None) is None  # mlp_only_layers=[1]
    assert layers[0].experts.gate.shape == (8, 32, 64) and layers[0].experts.normalize
    error = float(np.abs(engine.score(PROMPT) - hf_logits(reference, PROMPT)).max())
    assert error < LOGIT_TOLERANCE
    assert engine_greedy(engine, PROMPT, GREEDY_STEPS) == hf_greedy_cached(reference, PROMPT, GREEDY_STEPS)


def test_cpu_backend_matches_reference(moe_dir):
    path, _ = moe_dir
    scores = [LLMEngine(EngineConfig(str(path), ctx_size=128, backend=b)).score(PROMPT) for b in ("reference", "cpu")]
    np.testing.assert_allclose(scores[1], scores[0], atol=1e-4, rtol=0)
