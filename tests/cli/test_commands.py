"""The CLI on the embedded default model: generate (text, --json, --chat, stdin, stop), tokenize, info."""
import io
import json

import pytest

from pocketcli.cli import main
from pocketcli.device import cuda_problem


def run_cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_generate_json_greedy_is_deterministic(capsys):
    args = ("generate", "-p", "The capital of France is", "-n", "12", "--temperature", "0", "--json")
    code, out, _ = run_cli(capsys, *args)
    assert code == 0
    result = json.loads(out)
    assert set(result) >= {"text", "token_ids", "prompt_tokens", "completion_tokens", "finish_reason", "timings"}
    assert result["prompt_tokens"] == 6 and result["completion_tokens"] == len(result["token_ids"]) == 12
    assert result["finish_reason"] == "length"
    assert "Paris" in result["text"] or result["text"].strip()
    assert json.loads(run_cli(capsys, *args)[1])["token_ids"] == result["token_ids"]


def test_generate_streams_text_and_reports_timings(capsys):
    code, out, err = run_cli(capsys, "generate", "-p", "Once upon a time", "-n", "8", "--seed", "3")
    assert code == 0 and out.strip()
    assert "prompt" in err and "tok/s" in err and "decode" in err


def test_seeded_sampling_reproduces(capsys):
    args = ("generate", "-p", "My favourite food is", "-n", "10", "--seed", "42", "--temperature", "1.0", "--json")
    first = json.loads(run_cli(capsys, *args)[1])["token_ids"]
    assert json.loads(run_cli(capsys, *args)[1])["token_ids"] == first


def test_stop_string_cuts_output(capsys):
    args = ("generate", "-p", "1, 2, 3, 4,", "-n", "16", "--temperature", "0", "--json")  # " 5, 6, 7" is ~8 tokens
    full = json.loads(run_cli(capsys, *args)[1])["text"]
    assert "7" in full
    stopped = json.loads(run_cli(capsys, *args, "--stop", "7")[1])
    assert stopped["finish_reason"] == "stop" and stopped["text"] == full[:full.index("7")]


def test_prompt_from_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Water boils at"))
    code, out, _ = run_cli(capsys, "generate", "-n", "4", "--temperature", "0", "--json")
    assert code == 0 and json.loads(out)["prompt_tokens"] == 4


def test_chat_template_wraps_prompt(capsys):
    code, out, _ = run_cli(capsys, "generate", "--chat", "-p", "Hi", "-n", "4", "--temperature", "0", "--json")
    assert code == 0
    # <bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n: one BOS, not two
    assert json.loads(out)["prompt_tokens"] == 10


def test_tokenize_json(capsys):
    code, out, _ = run_cli(capsys, "tokenize", "The capital of France is", "--json")
    assert code == 0
    assert json.loads(out)["token_ids"] == [2, 818, 5279, 529, 7001, 563]


def test_info_describes_default_model(capsys):
    code, out, _ = run_cli(capsys, "info", "--json")
    info = json.loads(out)
    assert code == 0 and info["architecture"] == "gemma3" and info["layers"] == 18
    assert info["tensor_types"] == {"F32": 109, "Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9}
    assert info["context_length"] == 32768 and info["chat_template"].startswith("built-in")
    # 18 layers x 1 KV head x 256 dims x (K + V) x 2 bytes (the default f16 cache)
    assert info["device"] == "cpu" and info["kv_type"] == "f16" and info["kv_bytes_per_token"] == 18 * 1 * 256 * 2 * 2
    assert info["kv_bytes_per_token_by_type"]["f32"] == 18 * 1 * 256 * 2 * 4
    assert info["kv_bytes_per_token_by_type"]["q8_0"] == 18 * 1 * 256 // 32 * 34 * 2
    assert info["weight_bytes"] == info["file_size_bytes"]


def test_info_sizes_the_kv_cache_of_a_type_in_a_given_memory(capsys):
    code, out, _ = run_cli(capsys, "info", "--json", "--kv-type", "q4_0", "--memory", "90M")
    info = json.loads(out)
    # 8 blocks of 18 bytes and 3 outliers of 3 bytes a row (kv_type.q4_0_outliers)
    assert code == 0 and info["kv_bytes_per_token"] == 18 * (256 // 32 * 18 + 3 * 3) * 2
    assert info["kv_tokens_that_fit"] == 90 * 2**20 // info["kv_bytes_per_token"]
    assert run_cli(capsys, "info", "--kv-type", "q5")[0] == 2
    assert run_cli(capsys, "info", "--memory", "lots")[0] == 2


@pytest.mark.skipif(cuda_problem() is None, reason="a usable GPU is present")
def test_info_device_cuda_without_gpu_is_a_user_error(capsys):
    code, _, err = run_cli(capsys, "info", "--device", "cuda")
    assert code == 2 and "--device cuda" in err


def test_bench_json_reports_pp_tg_and_rss(capsys):
    code, out, _ = run_cli(capsys, "bench", "-p", "16", "-n", "4", "-r", "2", "--json")
    report = json.loads(out)
    assert code == 0 and [r["test"] for r in report["results"]] == ["pp16", "tg4"]
    assert report["kv_type"] == "f16" and report["kv_bytes_per_token"] == 18 * 256 * 2 * 2
    for result in report["results"]:
        assert len(result["seconds"]) == 2 and result["tokens_per_second_mean"] > 0
    assert report["peak_rss_mib"] > 100


def test_bench_rejects_bad_sizes(capsys):
    code, _, err = run_cli(capsys, "bench", "-r", "0")
    assert code == 2 and err.startswith("error:")


def test_messages_file_uses_chat_template(capsys, tmp_path):
    path = tmp_path / "messages.json"
    path.write_text(json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]))
    code, out, _ = run_cli(capsys, "generate", "--messages", str(path), "-n", "2", "--temperature", "0", "--json")
    assert code == 0 and json.loads(out)["prompt_tokens"] > 10


@pytest.mark.parametrize("content", ["not json", "[]", '[{"role": "user"}]'])
def test_bad_messages_file_is_one_line_error(capsys, tmp_path, content):
    path = tmp_path / "messages.json"
    path.write_text(content)
    code, _, err = run_cli(capsys, "generate", "--messages", str(path), "-n", "2")
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
