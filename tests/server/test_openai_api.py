"""The OpenAI API through the official `openai` client, against a real uvicorn server on loopback."""
import openai
import pytest

CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]
LONG_PROMPT = ("The quick brown fox jumps over the lazy dog. " * 6) + "Then the fox"


def chat_text(client, model_name, **kwargs):
    response = client.chat.completions.create(model=model_name, messages=CHAT, **kwargs)
    return response.choices[0].message.content, response


def test_health_and_models(live_server, client, model_name):
    assert live_server.request("GET", "/health") == (200, {"status": "ok"})
    assert [m.id for m in client.models.list().data] == [model_name]


def test_streaming_text_equals_non_streaming_for_the_same_seed(client, model_name):
    text, response = chat_text(client, model_name, max_tokens=10, temperature=0.9, seed=11)
    stream = client.chat.completions.create(model=model_name, messages=CHAT, max_tokens=10, temperature=0.9,
                                            seed=11, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text and text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [response.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == response.usage.completion_tokens


def test_seed_determinism(client, model_name):
    first, _ = chat_text(client, model_name, max_tokens=8, temperature=1.0, seed=5)
    second, _ = chat_text(client, model_name, max_tokens=8, temperature=1.0, seed=5)
    assert first == second


def test_n_choices(client, model_name):
    response = client.completions.create(model=model_name, prompt="My favourite fruit is", max_tokens=5, n=2,
                                         temperature=1.0, seed=3)
    assert [c.index for c in response.choices] == [0, 1]
    assert all(c.finish_reason in ("length", "stop") for c in response.choices)
    assert response.usage.completion_tokens <= 10 and response.usage.prompt_tokens > 0


def test_n_choices_stream(client, model_name):
    stream = client.completions.create(model=model_name, prompt="My favourite fruit is", max_tokens=4, n=2,
                                       temperature=0, stream=True)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts[0] == texts[1] and texts[0]  # greedy: both choices agree


def test_usage_numbers(live_server, client, model_name):
    _, response = chat_text(client, model_name, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    status, tokenized = live_server.request("POST", "/tokenize", {"messages": CHAT})
    assert status == 200
    usage = response.usage
    assert usage.prompt_tokens == tokenized["count"]
    assert usage.completion_tokens == 6 and response.choices[0].finish_reason == "length"
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_logprobs_chat(client, model_name):
    _, response = chat_text(client, model_name, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the most likely token
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob


def test_logprobs_completions(client, model_name):
    response = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=3,
                                         temperature=0, logprobs=2)
    logprobs = response.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 3
    assert "".join(logprobs.tokens) == response.choices[0].text


def test_stop_string_cuts_the_text(client, model_name):
    full = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=8,
                                     temperature=0).choices[0].text
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    response = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=8,
                                         temperature=0, stop=[stop])
    choice = response.choices[0]
    assert choice.finish_reason == "stop" and choice.text == full[:full.index(stop)]


def test_logit_bias_forces_a_token(client, model_name, engine_loop):
    token_id = engine_loop.engine.tokenizer.encode(" banana", add_special=False)[0]
    response = client.completions.create(model=model_name, prompt="Hello", max_tokens=3, temperature=0,
                                         logit_bias={str(token_id): 100})
    assert response.choices[0].text.split() == ["banana"] * 3


def test_prefix_cache_hit_is_reported_and_gives_the_same_text(client, model_name):
    first = client.completions.create(model=model_name, prompt=LONG_PROMPT, max_tokens=5, temperature=0)
    second = client.completions.create(model=model_name, prompt=LONG_PROMPT, max_tokens=5, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= 32
    assert second.choices[0].text == first.choices[0].text


def test_detokenize_round_trip(live_server):
    status, tokenized = live_server.request("POST", "/tokenize", {"prompt": "hello world",
                                                                  "add_special_tokens": False})
    assert status == 200
    assert live_server.request("POST", "/detokenize", {"tokens": tokenized["tokens"]}) == \
        (200, {"prompt": "hello world"})


def test_unknown_model_is_404_through_the_client(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=2)
    assert info.value.body["code"] == "model_not_found"


def test_prompt_longer_than_context_is_400(client, model_name):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_name, prompt="word " * 400, max_tokens=2)
    assert info.value.body["code"] == "context_length_exceeded"
