"""Hugging Face directories (safetensors, BF16/F32/FP8) against transformers on the same weights."""
import json
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.cli import main  # noqa: E402
from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from pocketcli.sampling_params import SamplingParams  # noqa: E402
from tests.hf.tiny_hf import (ARCHS, hf_greedy, hf_logits, load_float32, save_fp8_variant,  # noqa: E402
                              save_tiny_model)

PROMPT = [1, 17, 200, 45, 99, 150, 3, 260, 77, 12, 5, 64]
GREEDY_STEPS = 32
# float32 math on the same weights: only summation order differs (measured max ~5e-6 on logits of ~4)
LOGIT_TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-4, "fp8": 1e-4}
BACKEND = "reference"  # the numba backend is checked in test_cpu_backend_matches_reference


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {(arch, dtype): save_tiny_model(root / f"{arch}_{dtype}", arch, dtype) and root / f"{arch}_{dtype}"
            for arch in ARCHS for dtype in ("float32", "bfloat16")}


def make_engine(path: Path, backend: str = BACKEND) -> LLMEngine:
    return LLMEngine(EngineConfig(str(path), ctx_size=128, backend=backend))


def engine_greedy(engine: LLMEngine, ids: list[int], steps: int) -> list[int]:
    seq = engine.add_request(ids, SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return seq.token_ids[len(ids):]


def check_against(engine: LLMEngine, reference, tolerance: float) -> float:
    error = float(np.abs(engine.score(PROMPT) - hf_logits(reference, PROMPT)).max())
    assert error < tolerance
    assert engine_greedy(engine, PROMPT, GREEDY_STEPS) == hf_greedy(reference, PROMPT, GREEDY_STEPS)
    return error


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_greedy_match_transformers(model_dirs, arch, dtype):
    path = model_dirs[arch, dtype]
    check_against(make_engine(path), load_float32(path), LOGIT_TOLERANCE[dtype])


@pytest.mark.parametrize("arch, layout", [(arch, "block") for arch in ARCHS]
                         + [("qwen3", "channel"), ("llama", "tensor")])
def test_fp8_matches_transformers_on_dequantized_weights(model_dirs, tmp_path, arch, layout):
    reference = save_fp8_variant(model_dirs[arch, "bfloat16"], tmp_path / "fp8", layout)
    engine = make_engine(tmp_path / "fp8")
    wq = engine.model.layers[0].wq
    assert wq.type_name == "F8_E4M3" and wq.data.dtype == np.uint8 and wq.nbytes == np.prod(wq.shape)
    check_against(engine, reference, LOGIT_TOLERANCE["fp8"])


def test_cpu_backend_matches_reference(model_dirs, tmp_path):
    pytest.importorskip("kernels_numba.cpu", exc_type=ImportError)
    save_fp8_variant(model_dirs["qwen3", "bfloat16"], tmp_path / "fp8", "block")
    for path in (model_dirs["gemma3", "bfloat16"], tmp_path / "fp8"):
        expected = make_engine(path, "reference").score(PROMPT)
        np.testing.assert_allclose(make_engine(path, "cpu").score(PROMPT), expected, atol=1e-4, rtol=0)


def test_sharded_checkpoint(tmp_path):
    path = tmp_path / "sharded"
    model = save_tiny_model(path, "llama", "bfloat16", max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").exists()
    error = float(np.abs(make_engine(path).score(PROMPT) - hf_logits(load_float32(path), PROMPT)).max())
    assert error < 1e-4 and model is not None


def test_tokenizer_matches_transformers(model_dirs):
    from transformers import AutoTokenizer

    from pocketcli.model_source import make_tokenizer, open_model_file

    path = model_dirs["qwen2", "float32"]
    ours, theirs = make_tokenizer(open_model_file(path)), AutoTokenizer.from_pretrained(path)
    text = "hello world, <|im_start|>the lazy fox"
    assert ours.encode(text) == theirs(text)["input_ids"]
    assert ours.encode(text, add_special=False, parse_special=False) == theirs(
        text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ids = ours.encode(text)
    assert ours.decode(ids) == theirs.decode(ids)
    assert b"".join(ours.token_to_piece(i, special=True) for i in ids).decode() == "<s>" + text
    assert ours.bos_id == 1 and ours.eos_id == 2 and ours.add_bos and set(ours.stop_token_ids) == {2, 4}


def test_cli_commands_accept_a_directory(model_dirs, capsys):
    path = str(model_dirs["gemma3", "bfloat16"])
    assert main(["info", "-m", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "safetensors" and info["architecture"] == "gemma3" and "BF16" in info["tensor_types"]
    assert main(["tokenize", "-m", path, "hello world", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"][0] == 1
    assert main(["generate", "-m", path, "-p", "hello", "-n", "4", "--temp", "0", "--backend", "reference",
                 "--json", "--chat", "--ignore-eos"]) == 0
    assert json.loads(capsys.readouterr().out)["completion_tokens"] == 4


# --- corrupt inputs: one clear line, exit code 2 -----------------------------------------------------------
def run_cli_error(path: Path, capsys) -> str:
    capsys.readouterr()  # drop transformers' progress output from building the model
    assert main(["info", "-m", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def copy_model(source: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(source, target)
    return target


def rewrite_header(path: Path, edit) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (length - len(raw)) if len(raw) <= length else b""
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length:])


def test_missing_shard(tmp_path, capsys):
    path = tmp_path / "sharded"
    save_tiny_model(path, "qwen2", "bfloat16", max_shard_size="40KB")
    next(p for p in sorted(path.glob("model-*.safetensors"))).unlink()
    assert "missing shard" in run_cli_error(path, capsys)


def test_header_that_lies_about_sizes(model_dirs, tmp_path, capsys):
    path = copy_model(model_dirs["llama", "float32"], tmp_path / "m")
    rewrite_header(path / "model.safetensors",
                   lambda h: h["model.norm.weight"].__setitem__("shape", [128]))
    assert "header lies about tensor model.norm.weight" in run_cli_error(path, capsys)


def test_truncated_file(model_dirs, tmp_path, capsys):
    path = copy_model(model_dirs["llama", "float32"], tmp_path / "m")
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    assert "truncated" in run_cli_error(path, capsys)


def test_unknown_dtype(model_dirs, tmp_path, capsys):
    path = copy_model(model_dirs["llama", "float32"], tmp_path / "m")
    rewrite_header(path / "model.safetensors", lambda h: h["model.norm.weight"].__setitem__("dtype", "F4"))
    assert "dtype F4" in run_cli_error(path, capsys)


def test_unsupported_architecture(model_dirs, tmp_path, capsys):
    path = copy_model(model_dirs["llama", "float32"], tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    config.update(architectures=["MambaForCausalLM"], model_type="mamba")
    (path / "config.json").write_text(json.dumps(config))
    assert "unsupported architecture 'MambaForCausalLM'" in run_cli_error(path, capsys)
    assert main(["generate", "-m", str(path), "-p", "hi", "--backend", "reference"]) == 2


def test_directory_without_config(tmp_path, capsys):
    assert "no config.json" in run_cli_error(tmp_path, capsys)
