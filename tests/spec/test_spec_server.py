"""Speculative decoding inside `pocket serve`: completions work and /metrics carries the acceptance counters."""
import pytest
from fastapi.testclient import TestClient

from pocketcli.config import EngineConfig
from pocketcli.engine.engine_loop import EngineLoop
from pocketcli.engine_factory import make_engine
from pocketcli.server import make_app
from tests.models.tiny_gguf import write_tiny_model


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = str(write_tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf", "llama"))
    engine = make_engine(EngineConfig(path, ctx_size=256, max_num_seqs=2, spec="draft", draft_model_path=path))
    loop = EngineLoop(engine).start()
    app = make_app(None, "tiny", None)
    app.state.server.attach(loop)
    with TestClient(app) as test_client:
        yield test_client
    loop.stop()


def metric(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_metrics_report_acceptance(client):
    response = client.post("/v1/completions", json={"model": "tiny", "prompt": "ab ab ab ab", "max_tokens": 12,
                                                     "temperature": 0})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 12
    text = client.get("/metrics").text
    assert metric(text, "pocket_spec_draft_tokens") > 0
    assert metric(text, "pocket_spec_accepted_tokens") == metric(text, "pocket_spec_draft_tokens")  # self-draft
    assert metric(text, "pocket_spec_acceptance_rate") == 1.0
    assert metric(text, "pocket_spec_mean_accepted_length") > 1.0
