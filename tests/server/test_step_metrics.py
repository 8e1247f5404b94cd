"""/metrics carries the engine's steps as the server runs them: their wall time, sequences and tokens."""
import re


def metrics(live_server) -> dict[str, float]:
    status, text = live_server.request("GET", "/metrics")
    assert status == 200
    return {name: float(value) for name, value in re.findall(r"^(pocket_engine_step_\w+) (\S+)$", text, re.MULTILINE)}


def test_steps_of_a_completion_show_in_metrics(live_server, model_name):
    before = metrics(live_server)
    status, body = live_server.request("POST", "/v1/completions", {
        "model": model_name, "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == 5
    after = metrics(live_server)
    steps = after["pocket_engine_step_seconds_count"] - before.get("pocket_engine_step_seconds_count", 0.0)
    assert steps >= 1  # a step can carry several sequences' tokens: other tests' requests may share it
    assert after["pocket_engine_step_tokens_total"] - before.get("pocket_engine_step_tokens_total", 0.0) >= 5
    assert after["pocket_engine_step_seconds_sum"] > before.get("pocket_engine_step_seconds_sum", 0.0)
    assert after["pocket_engine_step_sequences_total"] >= after["pocket_engine_step_seconds_count"]
