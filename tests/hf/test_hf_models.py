"""Hugging Face directories (safetensors, BF16/F32/FP8) against transformers on the same weights."""
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pocketcli.cli import main  # noqa: E402
from pocketcli.config import EngineConfig  # noqa: E402
from pocketcli.engine.llm_engine import LLMEngine  # noqa: E402
from tests.hf.tiny_hf import (ARCHS, engine_greedy, hf_greedy, hf_logits, load_float32, save_fp8_variant,  # noqa: E402
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
    # FP8 through each CPU path: 32x40 blocks split 32-column chunks (tile decode + BLAS for every token count),
    # 32x32 blocks and per-channel scales take the fused kernels for decode
    save_fp8_variant(model_dirs["qwen3", "bfloat16"], tmp_path / "fp8", "block", build_reference=False)
    save_fp8_variant(model_dirs["llama", "bfloat16"], tmp_path / "fp8_32", "block", (32, 32), build_reference=False)
    save_fp8_variant(model_dirs["gemma3", "bfloat16"], tmp_path / "fp8_ch", "channel", build_reference=False)
    for path in (model_dirs["gemma3", "bfloat16"], tmp_path / "fp8", tmp_path / "fp8_32", tmp_path / "fp8_ch"):
        expected = make_engine(path, "reference").score(PROMPT)
        cpu_engine = make_engine(path, "cpu")
        np.testing.assert_allclose(cpu_engine.score(PROMPT), expected, atol=1e-4, rtol=0)
        assert engine_greedy(cpu_engine, PROMPT, 8) == engine_greedy(make_engine(path, "reference"), PROMPT, 8)


def test_fp8_static_input_scales_are_carried_and_shown(model_dirs, tmp_path, capsys):
    """input_scale (static W8A8) is read and shown; activations stay float32, as transformers runs it on CPU."""
    path = tmp_path / "static"
    reference = save_fp8_variant(model_dirs["qwen3", "bfloat16"], path, "tensor", static_input_scales=True)
    engine = make_engine(path, "cpu")
    wq = engine.model.layers[0].wq
    assert wq.fp8.layout == "tensor" and wq.fp8.input_scale is not None and wq.fp8.input_scale > 0
    check_against(engine, reference, LOGIT_TOLERANCE["fp8"])
    capsys.readouterr()
    assert main(["info", "-m", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["quantization"]["activation_scheme"] == "static" and info["tensor_types"]["F8_E4M3"] == 21
    assert info["fp8"]["weights"] == 21 and info["fp8"]["scale_layouts"] == {"tensor": 21}
    assert "static input_scale on 21 weights" in info["fp8"]["activations"]
    assert main(["info", "-m", str(path)]) == 0
    assert re.search(r"^fp8 +21 E4M3 weights, .* scales: tensor x21; activations: static", capsys.readouterr().out,
                     re.MULTILINE)


def test_info_shows_block_fp8_layout(model_dirs, tmp_path, capsys):
    path = tmp_path / "fp8"
    save_fp8_variant(model_dirs["llama", "bfloat16"], path, "block", (32, 32), build_reference=False)
    capsys.readouterr()
    assert main(["info", "-m", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "safetensors" and info["quantization"]["weight_block_size"] == [32, 32]
    assert info["fp8"]["scale_layouts"] == {"block 32x32": 21}
    assert info["fp8"]["activations"].startswith("dynamic")
    num_fp8_values = sum(int(np.prod(s)) for s in [(64, 64), (32, 64), (32, 64), (64, 64), (96, 64), (96, 64),
                                                    (64, 96)]) * 3
    assert info["fp8"]["bytes"] == num_fp8_values  # 1 byte per weight


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


def fp8_copy(model_dirs, tmp_path) -> Path:
    path = tmp_path / "fp8"
    save_fp8_variant(model_dirs["llama", "bfloat16"], path, "block", (32, 32), build_reference=False)
    return path


def test_fp8_weight_without_its_scale(model_dirs, tmp_path, capsys):
    path = fp8_copy(model_dirs, tmp_path)
    rewrite_header(path / "model.safetensors", lambda h: h.pop("model.layers.1.mlp.up_proj.weight_scale_inv"))
    assert "model.layers.1.mlp.up_proj.weight has no weight_scale_inv" in run_cli_error(path, capsys)


def test_fp8_scales_that_do_not_fit_the_block_size(model_dirs, tmp_path, capsys):
    path = fp8_copy(model_dirs, tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"]["weight_block_size"] = [16, 16]
    (path / "config.json").write_text(json.dumps(config))
    assert "does not match" in run_cli_error(path, capsys)


def test_fp8_scale_that_is_not_finite(model_dirs, tmp_path, capsys):
    path = fp8_copy(model_dirs, tmp_path)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    begin = json.loads(data[8:8 + length])["model.layers.2.self_attn.o_proj.weight_scale_inv"]["data_offsets"][0]
    data[8 + length + begin:8 + length + begin + 4] = struct.pack("<f", float("nan"))
    weights.write_bytes(bytes(data))
    assert "NaN or infinity" in run_cli_error(path, capsys)
