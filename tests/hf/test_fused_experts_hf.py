"""MoE checkpoints in both expert layouts: one tensor per expert (the hub releases; what save_pretrained writes by
default) and transformers 5's fused layout (model.layers.L.mlp.experts.gate_up_proj [experts, 2 * intermediate,
hidden], ...down_proj [experts, hidden, intermediate]: the modules' own parameters, written by
save_pretrained(save_original_format=False) and by tools that save the state dict as it is). Each tiny model is
saved both ways by the installed transformers and checked against transformers' own logits."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from gguf_loader.hf_checkpoint import open_hf_checkpoint  # noqa: E402
from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from tests.hf.tiny_hf import hf_logits, make_tokenizer_files  # noqa: E402
from tests.hf.tiny_qwen_next_hf import save_tiny_model, single_torch_thread  # noqa: E402
from tests.spec.spec_checkpoints import save_tiny_deepseek  # noqa: E402

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
LOGIT_TOLERANCE = 1e-4  # float32 on both sides (an f32 KV cache: the f16 default rounds keys and values)
ARCHS = {"qwen3moe": 0, "qwen3next": 0, "qwen35moe": 0, "deepseek2": 1}  # arch -> a layer with routed experts
single_torch_thread = pytest.fixture(scope="module", autouse=True)(single_torch_thread)


def safetensors_keys(directory) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), "np") as f:
        return set(f.keys())


@pytest.fixture(scope="module", params=ARCHS)
def both_layouts(request, tmp_path_factory):
    """(arch, per-expert dir, fused dir, the transformers model both hold)."""
    arch, root = request.param, tmp_path_factory.mktemp(request.param)
    if arch == "deepseek2":
        model = save_tiny_deepseek(root / "per_expert")
    else:
        model = save_tiny_model(root / "per_expert", arch)
    model.save_pretrained(root / "fused", save_original_format=False)
    make_tokenizer_files(root / "fused")
    return arch, root / "per_expert", root / "fused", model


def test_fused_layout_matches_transformers(both_layouts):
    arch, per_expert, fused, model = both_layouts
    layer = ARCHS[arch]
    keys = safetensors_keys(fused)
    assert {f"model.layers.{layer}.mlp.experts.{kind}" for kind in ("gate_up_proj", "down_proj")} <= keys
    assert not any(".experts.0." in k for k in keys) and any(".experts.0." in k for k in safetensors_keys(per_expert))
    engine = LLMEngine(EngineConfig(str(fused), ctx_size=128, backend="reference", kv_type="f32"))
    error = float(np.abs(engine.score(PROMPT) - hf_logits(model, PROMPT)).max())
    assert error < LOGIT_TOLERANCE, (arch, error)


def test_both_layouts_give_the_same_stacked_experts(both_layouts):
    arch, per_expert, fused, _ = both_layouts
    a, b = open_hf_checkpoint(per_expert), open_hf_checkpoint(fused)
    names = [n for n in a.tensor_infos if "_exps." in n]
    assert names and sorted(names) == sorted(n for n in b.tensor_infos if "_exps." in n)
    for name in names:
        assert a.tensor_infos[name].shape == b.tensor_infos[name].shape == b.tensor(name).shape, name
        np.testing.assert_array_equal(np.asarray(a.tensor(name).data), np.asarray(b.tensor(name).data), err_msg=name)


def test_cpu_backend_runs_the_fused_layout(both_layouts):
    arch, _, fused, _ = both_layouts
    if arch != "qwen3moe":
        pytest.skip("one architecture is enough for the CPU kernels: the loader hands them the same tensors")
    scores = [LLMEngine(EngineConfig(str(fused), ctx_size=128, backend=backend, kv_type="f32")).score(PROMPT)
              for backend in ("reference", "cpu")]
    np.testing.assert_allclose(scores[1], scores[0], atol=1e-4, rtol=0)
