"""Tools into the prompt. Templates that know tools get the HF `tools` variable (and tool-call arguments as
objects, as HF templates expect); templates that do not (built-in ones) get a system prompt describing the tools
in the `<tool_call>` format, and tool turns folded into user/assistant turns they can render."""
from __future__ import annotations

import json

from ..tokenizer import ChatTemplate

TOOL_SYSTEM_PROMPT = (
    "You can call these functions. To call one, reply with only\n"
    '<tool_call>\n{{"name": <function name>, "arguments": <arguments object>}}\n</tool_call>\n'
    "Functions:\n{functions}")


def render_chat(template: ChatTemplate, messages: list[dict], tools: list[dict] | None) -> str:
    if template.supports_tools:
        messages = [_arguments_as_objects(m) for m in messages]
        return template.render(messages, tools=tools) if tools else template.render(messages)
    if tools or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
        messages = _fold_tool_turns(messages)
    if tools:
        messages = _with_tool_system_prompt(messages, tools)
    return template.render(messages)


def describe_tools(tools: list[dict]) -> str:
    return TOOL_SYSTEM_PROMPT.format(functions="\n".join(json.dumps(t.get("function", t)) for t in tools))


def _with_tool_system_prompt(messages: list[dict], tools: list[dict]) -> list[dict]:
    prompt = describe_tools(tools)
    if messages and messages[0].get("role") in ("system", "developer"):
        first = messages[0]
        return [{**first, "role": "system", "content": f"{_text(first.get('content'))}\n\n{prompt}"}] + messages[1:]
    return [{"role": "system", "content": prompt}] + messages


def _fold_tool_turns(messages: list[dict]) -> list[dict]:
    """Tool results become user turns, assistant tool calls become `<tool_call>` text; neighbours with the same
    role merge, so templates that insist on alternating roles still render."""
    folded: list[dict] = []
    for message in messages:
        role, content = message.get("role"), _text(message.get("content"))
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        elif role == "assistant" and message.get("tool_calls"):
            content += "".join(_call_text(call) for call in message["tool_calls"])
        if folded and folded[-1]["role"] == role and role != "system":
            folded[-1] = {**folded[-1], "content": folded[-1]["content"] + "\n" + content}
        else:
            folded.append({"role": role, "content": content})
    return folded


def _call_text(call: dict) -> str:
    function = call.get("function", {})
    body = {"name": function.get("name"), "arguments": _as_object(function.get("arguments"))}
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"


def _arguments_as_objects(message: dict) -> dict:
    if not message.get("tool_calls"):
        return message
    calls = [{**c, "function": {**c.get("function", {}), "arguments": _as_object(c.get("function", {})
                                                                                  .get("arguments"))}}
             for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def _as_object(arguments):
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
