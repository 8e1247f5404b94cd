"""NaN logits are an error, never a silent token: a tiny FP8 checkpoint with one NaN code (E4M3 0x7f) in its
last MLP down projection makes every logit NaN; the CLI prints one line and exits 2, the server answers an
OpenAI-style 500 (code nan_logits), streamed or not, and keeps serving. (The code sits past the last attention:
a NaN query makes the CPU prefill attention divide by a zero softmax sum, a ZeroDivisionError, not NaN.)"""
import json

import pytest

from conftest import LiveServer, free_port
from pocketcli.cli import main
from pocketcli.config import EngineConfig
from pocketcli.engine.engine_loop import EngineLoop
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.server import make_app
from tests.hf.tiny_hf import save_fp8_variant, save_tiny_model, set_fp8_code

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def nan_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("nan")
    save_tiny_model(root / "bf16", "qwen3", "bfloat16")
    save_fp8_variant(root / "bf16", root / "fp8", "block", (32, 32), build_reference=False)
    set_fp8_code(root / "fp8", "model.layers.2.mlp.down_proj.weight", (3, 5), 0x7F)
    return root / "fp8"


def test_generate_prints_one_line_and_exits_2(nan_model, capsys):
    assert main(["generate", "-m", str(nan_model), "-p", "hello", "-n", "4", "--temperature", "0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error: ") == 1
    assert err.strip().splitlines()[-1].startswith("error: the model computed NaN logits")


def test_server_answers_an_openai_error(nan_model):
    loop = EngineLoop(LLMEngine(EngineConfig(str(nan_model), ctx_size=256, backend="cpu"))).start()
    server = LiveServer(make_app(loop, "nan"), free_port()).start()
    try:
        for _ in range(2):  # the server survives the first
            status, body = server.request("POST", "/v1/chat/completions", CHAT)
            assert status == 500 and body["error"]["code"] == "nan_logits"
            assert body["error"]["type"] == "server_error" and "NaN logits" in body["error"]["message"]
        status, text = server.request("POST", "/v1/chat/completions", {**CHAT, "stream": True})
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        assert status == 200 and events[-1]["error"]["code"] == "nan_logits"
        assert not any(e.get("choices", [{}])[0].get("delta", {}).get("content") for e in events[:-1])
    finally:
        server.stop()
        loop.stop()
