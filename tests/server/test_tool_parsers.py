"""Tool-call parsers, the streaming delta emitter, the think-tag splitter and tool prompts, on hand-written text."""
import json

import pytest

from pocketcli.server.chat_output import ChatOutputPlan
from pocketcli.server.reasoning import ReasoningSplitter, prompt_opens_reasoning, split_reasoning
from pocketcli.server.tool_parsers import (GenericToolParser, HermesToolParser, JsonArrayToolParser,
                                           Llama3JsonToolParser, MistralToolParser, NamedToolParser,
                                           make_tool_parser, parser_name_for_template)
from pocketcli.server.tool_prompt import render_chat
from pocketcli.tokenizer import ChatTemplate

HERMES = ('Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "name": "x"}}\n'
          '</tool_call>\n<tool_call>\n{"arguments": {"tz": "UTC"}, "name": "get_time"}\n</tool_call>')
LLAMA3 = '{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "get_time", "parameters": {}}'
MISTRAL = ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}, '
           '{"name": "get_time", "arguments": "{}"}]')
FENCED = 'Calling it now.\n```json\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n```'
CASES = [  # (parser, text, content, [(name, arguments)])
    (HermesToolParser(), HERMES, "Let me check.",
     [("get_weather", {"city": "Paris", "name": "x"}), ("get_time", {"tz": "UTC"})]),
    (Llama3JsonToolParser(), LLAMA3, "", [("get_weather", {"city": "Oslo"}), ("get_time", {})]),
    (Llama3JsonToolParser(), "<|python_tag|>" + LLAMA3.split(";")[0], "", [("get_weather", {"city": "Oslo"})]),
    (MistralToolParser(), MISTRAL, "", [("get_weather", {"city": "Rome"}), ("get_time", {})]),
    (MistralToolParser(), MISTRAL.removeprefix("[TOOL_CALLS]"), "",  # the control token hidden by the detokenizer
     [("get_weather", {"city": "Rome"}), ("get_time", {})]),
    (MistralToolParser(), 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]get_time[ARGS]{}', "Sure.",
     [("get_weather", {"city": "Rome"}), ("get_time", {})]),  # the v11+ tokenizer's name[ARGS]{...} form
    (GenericToolParser(), FENCED, "Calling it now.\n", [("get_weather", {"city": "Lima"})]),
    (GenericToolParser(), HERMES, "Let me check.", [("get_weather", {"city": "Paris", "name": "x"}),
                                                    ("get_time", {"tz": "UTC"})]),
    (GenericToolParser(), '{"name": "f", "parameters": {"a": [1, {"b": "}"}]}}', "", [("f", {"a": [1, {"b": "}"}]})]),
    (JsonArrayToolParser(), '[{"name": "f", "arguments": {"a": 1}}]', "", [("f", {"a": 1})]),
    (NamedToolParser("f"), '{"a": 1}', "", [("f", {"a": 1})]),
]


@pytest.mark.parametrize("parser, text, content, calls", CASES)
def test_parsers_read_calls(parser, text, content, calls):
    parsed = parser.parse(text)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls


@pytest.mark.parametrize("parser, text", [
    (HermesToolParser(), "No tools needed: the answer is 4."),
    (HermesToolParser(), 'Broken <tool_call>{"name": "f", "arguments": {"a": </tool_call>'),
    (Llama3JsonToolParser(), "The answer is {4}."),
    (MistralToolParser(), "Plain [text] here."),
    (GenericToolParser(), 'hello {"name": "f"}'),
])
def test_text_without_a_readable_call_stays_content(parser, text):
    parsed = parser.parse(text)
    assert parsed.content == text and parsed.calls == []


@pytest.mark.parametrize("parser, text", [(case[0], case[1]) for case in CASES] + [
    (HermesToolParser(), "Just text, with a < sign and <tool partial"),
])
def test_streamed_deltas_add_up_to_the_whole_message(parser, text):
    """Feed the reply a few characters at a time: content, names and argument chunks reassemble exactly."""
    plan = ChatOutputPlan(parser)
    whole, calls_tools = plan.finalize(text)
    stream = plan.make_stream()
    deltas = [d for i in range(0, len(text), 3) for d in stream.feed(text[i:i + 3])] + stream.finish()
    content = "".join(d.get("content", "") for d in deltas)
    calls = {}
    for delta in (d["tool_calls"][0] for d in deltas if "tool_calls" in d):
        call = calls.setdefault(delta["index"], {"name": None, "arguments": "", "id": None})
        if "id" in delta:
            assert call["id"] is None and delta["function"]["name"]  # id and name come once, first
            call.update(id=delta["id"], name=delta["function"]["name"])
        call["arguments"] += delta["function"]["arguments"]
    assert content == (whole["content"] or "")
    assert stream.has_tool_calls == calls_tools
    expected = [(c["function"]["name"], c["function"]["arguments"]) for c in whole.get("tool_calls", [])]
    assert [(c["name"], c["arguments"]) for c in calls.values()] == expected


def test_arguments_stream_before_the_call_completes():
    stream = ChatOutputPlan(HermesToolParser()).make_stream()
    deltas = stream.feed('<tool_call>{"name": "f", "arguments": {"text": "a long')
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "f"
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas) == '{"text": "a long'


def test_parser_choice_follows_the_template():
    assert parser_name_for_template("...<tool_call>...") == "hermes"
    assert parser_name_for_template("...[TOOL_CALLS]...") == "mistral"
    assert parser_name_for_template("<|python_tag|> ipython") == "llama3_json"
    assert parser_name_for_template("", "llama3") == "llama3_json"
    assert parser_name_for_template("", "gemma") == "generic"
    with pytest.raises(ValueError):
        make_tool_parser("nope")


@pytest.mark.parametrize("text, starts_in, reasoning, content", [
    ("<think>Compare 2+2.</think>\n\nIt is 4.", False, "Compare 2+2.", "It is 4."),
    ("Compare first.</think>Four.", True, "Compare first.", "Four."),
    ("No thinking at all.", False, None, "No thinking at all."),
    ("<think>never closed", False, "never closed", ""),
    ("Answer <think> is text once content began.", False, None, "Answer <think> is text once content began."),
])
def test_reasoning_split_whole_and_streamed(text, starts_in, reasoning, content):
    assert split_reasoning(text, starts_in) == (reasoning, content)
    splitter = ReasoningSplitter(starts_in)
    pieces = [splitter.feed(ch) for ch in text] + [splitter.flush()]
    assert "".join(r for r, _ in pieces) == (reasoning or "")
    assert "".join(c for _, c in pieces) == content


def test_reasoning_then_tool_call():
    plan = ChatOutputPlan(HermesToolParser(), reasoning=True)
    message, calls_tools = plan.finalize('<think>need weather</think><tool_call>{"name": "w", "arguments": {}}'
                                         '</tool_call>')
    assert calls_tools and message["reasoning_content"] == "need weather" and message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "w", "arguments": "{}"}
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
HISTORY = [{"role": "user", "content": "Weather?"},
           {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
           {"role": "tool", "tool_call_id": "c1", "content": "3 C"},
           {"role": "tool", "tool_call_id": "c2", "content": "windy"}]


def test_templates_with_tools_get_the_tools_variable_and_argument_objects():
    template = ChatTemplate("{% for t in tools %}[{{ t.function.name }}]{% endfor %}"
                            "{% for m in messages %}{% for c in m.tool_calls or [] %}"
                            "{{ c.function.arguments.city }}{% endfor %}{% endfor %}")
    assert render_chat(template, HISTORY, TOOLS) == "[get_weather]Oslo"


def test_templates_without_tools_get_a_tool_prompt_and_folded_turns():
    template = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", name="test")
    text = render_chat(template, HISTORY, TOOLS)
    assert text.startswith("<system>") and '"name": "get_weather"' in text
    assert '<assistant><tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert text.endswith("<user><tool_response>\n3 C\n</tool_response>\n<tool_response>\nwindy\n</tool_response>")
