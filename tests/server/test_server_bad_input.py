"""Bad requests get OpenAI-style error bodies with 4xx codes, and never break the server."""
import json
import random

import pytest

from conftest import LiveServer, free_port
from pocketcli.server import make_app

GOOD_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}

BAD_REQUESTS = [
    ("/v1/chat/completions", "{not json", 400, None),
    ("/v1/chat/completions", "[1, 2, 3]", 400, None),
    ("/v1/chat/completions", {}, 400, "messages"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": "hello"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role"),
    ("/v1/chat/completions", {**GOOD_CHAT, "temperature": "hot"}, 400, "temperature"),
    ("/v1/chat/completions", {**GOOD_CHAT, "temperature": 5}, 400, "temperature"),
    ("/v1/chat/completions", {**GOOD_CHAT, "max_tokens": -1}, 400, "max_tokens"),
    ("/v1/chat/completions", {**GOOD_CHAT, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    ("/v1/chat/completions", {**GOOD_CHAT, "n": 0}, 400, "n"),
    ("/v1/chat/completions", {**GOOD_CHAT, "top_p": 0}, 400, "top_p"),
    ("/v1/chat/completions", {**GOOD_CHAT, "top_logprobs": 50, "logprobs": True}, 400, "top_logprobs"),
    ("/v1/chat/completions", {**GOOD_CHAT, "logit_bias": {"abc": 1}}, 400, "logit_bias"),
    ("/v1/chat/completions", {**GOOD_CHAT, "logit_bias": {"5": 1000}}, 400, "logit_bias"),
    ("/v1/chat/completions", {**GOOD_CHAT, "logit_bias": {"999999999": 1}}, 400, "logit_bias"),
    ("/v1/chat/completions", {**GOOD_CHAT, "stop": 5}, 400, "stop"),
    ("/v1/chat/completions", {**GOOD_CHAT, "model": "gpt-17"}, 404, "model"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1, -3]}, 400, "prompt"),
    ("/v1/completions", {"prompt": "word " * 400, "max_tokens": 2}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "presence_penalty": 3}, 400, "presence_penalty"),
    ("/detokenize", {"tokens": [10 ** 9]}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
]


def assert_openai_error(status, body, expected_status, expected_param="-"):
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"]
    if expected_param != "-":
        assert body["error"]["param"] == expected_param, body


@pytest.mark.parametrize("path, body, status, param", BAD_REQUESTS)
def test_bad_request_gets_an_openai_error(live_server, path, body, status, param):
    assert_openai_error(*live_server.request("POST", path, body), status, param)


def test_unknown_route_and_method(live_server):
    assert_openai_error(*live_server.request("GET", "/v1/nothing"), 404)
    assert_openai_error(*live_server.request("GET", "/v1/chat/completions"), 405)


def random_bad_body(rng: random.Random) -> str:
    good = json.dumps(GOOD_CHAT)
    choice = rng.randrange(5)
    if choice == 0:  # truncated JSON
        return good[:rng.randrange(1, len(good) - 1)]
    if choice == 1:  # random bytes as text
        return "".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(1, 60)))
    if choice == 2:  # a field with the wrong type
        key = rng.choice(["temperature", "max_tokens", "n", "top_p", "messages", "stop", "seed", "logprobs"])
        return json.dumps({**GOOD_CHAT, key: rng.choice([{"a": 1}, [[]]])})
    if choice == 3:  # a message that is not a message
        return json.dumps({"messages": [rng.choice([1, "x", None, {"content": "no role"}])]})
    return json.dumps(rng.choice([None, 1, "s", [], True]))


def test_fifty_malformed_requests_then_a_good_one(live_server):
    rng = random.Random(1234)
    for _ in range(50):
        status, body = live_server.request("POST", "/v1/chat/completions", random_bad_body(rng))
        assert_openai_error(status, body, status)
        assert 400 <= status < 500
    status, body = live_server.request("POST", "/v1/chat/completions", GOOD_CHAT)
    assert status == 200 and body["choices"][0]["message"]["content"] is not None


def test_api_key_is_required_when_set(engine_loop, model_name):
    import openai

    server = LiveServer(make_app(engine_loop, model_name, api_key="s3cret"), free_port()).start()
    try:
        assert server.request("GET", "/health")[0] == 200  # health and metrics stay open for probes
        assert_openai_error(*server.request("GET", "/v1/models"), 401)
        assert_openai_error(*server.request("GET", "/v1/models", headers={"Authorization": "Bearer nope"}), 401)
        good = openai.OpenAI(base_url=server.base_url + "/v1", api_key="s3cret", max_retries=0)
        assert [m.id for m in good.models.list().data] == [model_name]
    finally:
        server.stop()


def test_health_is_503_while_loading(model_name):
    server = LiveServer(make_app(None, model_name), free_port()).start()
    try:
        assert server.request("GET", "/health") == (503, {"status": "loading"})
        assert_openai_error(*server.request("POST", "/v1/chat/completions", GOOD_CHAT), 503)
    finally:
        server.stop()
