"""tools + tool_choice against the real server: forced calls through the llguidance JSON-schema path, "auto"
calls parsed out of the reply (no tool text in content), and streamed tool-call deltas."""
import json

import jsonschema
import openai
import pytest

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city"],
           "properties": {"city": {"type": "string", "minLength": 2, "maxLength": 10}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {},
                                                                        "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def chat(client, model_name, **kwargs):
    return client.chat.completions.create(model=model_name, messages=ASK, tools=TOOLS, max_tokens=30,
                                          temperature=0, **kwargs)


def reassemble(stream):
    """Tool calls and content from SSE chunks, OpenAI-client style: per index, name once, arguments appended."""
    calls, content, finish = {}, "", None
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = call["id"] or delta.id
                call["name"] += (delta.function.name or "") if delta.function else ""
                call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    return calls, content, finish


def test_named_tool_choice_streamed_deltas_reassemble_to_the_same_call(client, model_name):
    # both compared requests find the prompt in the prefix cache: a cold prefill (tile decode + BLAS past 64
    # tokens) and a cached one (the 8-bit dots for the rest) agree only up to float rounding, enough to flip a
    # near-tie at temperature 0
    chat(client, model_name, tool_choice=NAMED)
    response = chat(client, model_name, tool_choice=NAMED)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)

    calls, content, finish = reassemble(chat(client, model_name, tool_choice=NAMED, stream=True))
    assert finish == "tool_calls" and content == ""
    assert list(calls) == [0] and calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == json.loads(call.function.arguments)


def test_required_tool_choice_gives_a_valid_call(client, model_name):
    response = chat(client, model_name, tool_choice="required", parallel_tool_calls=False)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_auto_tool_call_is_parsed_out_of_the_reply(client, model_name):
    """The model replies with a bare JSON call (forced by a schema here, since the base model would not); the
    template's parser (generic, for the built-in Gemma template) turns it into tool_calls, none of it in content.
    The `<tool_call>` tag format and its streaming are covered on hand-written text in test_tool_parsers.py."""
    call_schema = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                   "properties": {"name": {"const": "get_weather"}, "arguments": WEATHER}}
    response = chat(client, model_name, tool_choice="auto", extra_body={"guided_json": call_schema})
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)


def test_tool_prompt_reaches_the_model_and_none_leaves_it_out(live_server):
    with_tools = live_server.request("POST", "/tokenize", {"messages": ASK})[1]["count"]
    status, body = live_server.request("POST", "/v1/chat/completions", {
        "messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 1, "temperature": 0})
    assert status == 200 and body["usage"]["prompt_tokens"] == with_tools  # "none": tools not rendered
    status, body = live_server.request("POST", "/v1/chat/completions", {
        "messages": ASK, "tools": TOOLS, "max_tokens": 1, "temperature": 0})
    assert status == 200 and body["usage"]["prompt_tokens"] > with_tools + 20


def test_tool_history_renders(client, model_name):
    """An assistant tool call and its tool result render through a template without tool support."""
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'}]
    response = client.chat.completions.create(model=model_name, messages=messages, tools=TOOLS, max_tokens=1,
                                              temperature=0)
    assert response.usage.prompt_tokens > 0


@pytest.mark.parametrize("kwargs, param", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
])
def test_bad_tool_requests_are_400(client, model_name, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, model_name, **kwargs)
    assert info.value.body["param"] == param


def test_tool_choice_without_tools_is_400(live_server):
    status, body = live_server.request("POST", "/v1/chat/completions",
                                       {"messages": ASK, "tool_choice": "required", "max_tokens": 2})
    assert status == 400 and body["error"]["param"] == "tool_choice"
