"""Bad input never crashes: one clear line on stderr, exit code 2, no traceback (unless --debug)."""
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter

from pocketcli.cli import main
from tests.models.tiny_gguf import finish_gguf, write_tiny_model


def run_cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code, err, fragment):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf", "llama")


def test_missing_file(capsys, tmp_path):
    code, _, err = run_cli(capsys, "generate", "-m", str(tmp_path / "absent.gguf"), "-p", "hi")
    assert_one_line_error(code, err, "not found")


def test_not_a_gguf_file(capsys, tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"just some text that is long enough to be read as a header\n" * 4)
    code, _, err = run_cli(capsys, "generate", "-m", str(path), "-p", "hi")
    assert_one_line_error(code, err, "not a GGUF file")


def test_truncated_gguf(capsys, tmp_path, tiny_model):
    data = tiny_model.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:len(data) * 2 // 3])
    code, _, err = run_cli(capsys, "info", "-m", str(path))
    assert_one_line_error(code, err, "truncated")


def test_unknown_architecture(capsys, tmp_path):
    path = tmp_path / "mamba.gguf"
    writer = GGUFWriter(str(path), "mamba9")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    finish_gguf(writer)
    code, _, err = run_cli(capsys, "generate", "-m", str(path), "-p", "hi")
    assert_one_line_error(code, err, "unsupported architecture 'mamba9'")


def test_unsupported_quant_type(capsys, tmp_path, tiny_model):
    # rewrite the tiny model with one weight stored as MXFP4, a type we have no kernel for
    from gguf import GGUFReader
    reader = GGUFReader(tiny_model)
    path = tmp_path / "iq1.gguf"
    writer = GGUFWriter(str(path), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, field.types[0])
    for tensor in reader.tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape))
        if tensor.name == "blk.1.ffn_up.weight":
            row_bytes = shape[1] // 32 * 17
            writer.add_tensor(tensor.name, np.zeros((shape[0], row_bytes), np.uint8),
                              raw_dtype=GGMLQuantizationType.MXFP4)
        else:
            writer.add_tensor(tensor.name, np.asarray(tensor.data).reshape(shape), raw_dtype=tensor.tensor_type)
    finish_gguf(writer)
    code, _, err = run_cli(capsys, "generate", "-m", str(path), "-p", "hi")
    assert_one_line_error(code, err, "MXFP4")
    assert "blk.1.ffn_up.weight" in err


def test_prompt_longer_than_context(capsys, tiny_model):
    code, _, err = run_cli(capsys, "generate", "-m", str(tiny_model), "-p", "abc " * 100, "--ctx-size", "32")
    assert_one_line_error(code, err, "context")


def test_unreadable_prompt_file(capsys, tiny_model, tmp_path):
    code, _, err = run_cli(capsys, "generate", "-m", str(tiny_model), "-f", str(tmp_path / "none.txt"))
    assert_one_line_error(code, err, "cannot read prompt file")


def test_invalid_sampling_value(capsys, tiny_model):
    code, _, err = run_cli(capsys, "generate", "-m", str(tiny_model), "-p", "x", "--top-p", "0")
    assert_one_line_error(code, err, "top_p")


def test_unknown_registry_name(capsys):
    code, _, err = run_cli(capsys, "info", "-m", "no-such-model")
    assert_one_line_error(code, err, "unknown model 'no-such-model'")


def test_real_entry_point_exit_code_and_debug(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_text("x" * 100)
    cmd = [sys.executable, "-m", "pocketcli.cli", "generate", "-m", str(path), "-p", "hi"]
    plain = subprocess.run(cmd, capture_output=True, text=True)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().startswith("error:")
    debug = subprocess.run(cmd + ["--debug"], capture_output=True, text=True)
    assert debug.returncode == 2 and "Traceback" in debug.stderr
