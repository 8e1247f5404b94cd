"""The speculative flags on the CLI: --json gains acceptance counters; bad choices are one-line errors (exit 2)."""
import json

import pytest

from pocketcli.cli import main
from tests.models.tiny_gguf import write_tiny_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf", "llama"))


def run_cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_generate_json_reports_acceptance(capsys, tiny_model):
    code, out, _ = run_cli(capsys, "generate", "-m", tiny_model, "-p", "ab ab ab ab ab", "-n", "12", "--temp", "0",
                           "--ignore-eos", "--spec", "draft", "--draft-model", tiny_model, "--spec-k", "3", "--json")
    assert code == 0
    result = json.loads(out)
    spec = result["speculative"]
    assert spec["method"] == "draft" and spec["bonus_token_counted"] is True
    assert spec["accepted_tokens"] == spec["draft_tokens"] > 0  # the model drafting for itself
    assert spec["mean_accepted_length"] > 1.0
    assert result["completion_tokens"] == 12


@pytest.mark.parametrize("args, fragment", [
    (["--spec", "mtp"], "not available for this model"),
    (["--spec", "draft"], "needs --draft-model"),
    (["--spec", "ngram", "--spec-k", "0"], "spec-k"),
])
def test_bad_speculative_flags_are_one_line_errors(capsys, tiny_model, args, fragment):
    code, _, err = run_cli(capsys, "generate", "-m", tiny_model, "-p", "x", "-n", "2", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err
