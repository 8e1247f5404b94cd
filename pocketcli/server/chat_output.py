"""A chat reply's text -> the assistant message: `reasoning_content`, `content` and `tool_calls`, either whole
(`ChatOutputPlan.finalize`) or as SSE deltas (`ChatDeltaStream`) that add up to the same message."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from .reasoning import ReasoningSplitter, split_reasoning
from .tool_parsers import ParsedCall, ToolParser


def make_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def format_tool_call(call: ParsedCall, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


@dataclass
class ChatOutputPlan:
    """How one request's replies are read: with a tool parser (tools given, tool_choice not "none") and/or
    the think-tag reasoning split."""
    tool_parser: ToolParser | None = None
    reasoning: bool = False
    starts_in_reasoning: bool = False

    def finalize(self, text: str) -> tuple[dict, bool]:
        """(the assistant message, whether it calls tools)."""
        message: dict = {"role": "assistant"}
        content = text
        if self.reasoning:
            message["reasoning_content"], content = split_reasoning(text, self.starts_in_reasoning)
        calls = []
        if self.tool_parser is not None:
            parsed = self.tool_parser.parse(content)
            content, calls = parsed.content, parsed.calls
        if calls:
            message["tool_calls"] = [format_tool_call(c, make_call_id()) for c in calls]
        message["content"] = content if content.strip() or not calls else None
        return message, bool(calls)

    def make_stream(self) -> "ChatDeltaStream":
        return ChatDeltaStream(self)


class ChatDeltaStream:
    """One choice's deltas: feed text as the engine makes it, then `finish()` once."""

    def __init__(self, plan: ChatOutputPlan):
        self.plan = plan
        self.reasoning = ReasoningSplitter(plan.starts_in_reasoning) if plan.reasoning else None
        self.tools = ToolCallStreamer(plan.tool_parser) if plan.tool_parser else None

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tools and self.tools.sent_calls)

    def feed(self, text: str) -> list[dict]:
        reasoning, content = self.reasoning.feed(text) if self.reasoning else ("", text)
        return self._deltas(reasoning, content, final=False)

    def finish(self) -> list[dict]:
        reasoning, content = self.reasoning.flush() if self.reasoning else ("", "")
        return self._deltas(reasoning, content, final=True)

    def _deltas(self, reasoning: str, content: str, final: bool) -> list[dict]:
        deltas = [{"reasoning_content": reasoning}] if reasoning else []
        if self.tools is None:
            return deltas + ([{"content": content}] if content else [])
        return deltas + self.tools.feed(content, final)


class ToolCallStreamer:
    """Re-parses the growing content and sends what is new: content before the calls, then per call one delta
    with index, id and name, then argument chunks as they are written."""

    def __init__(self, parser: ToolParser):
        self.parser = parser
        self.text = ""
        self.sent_content = ""
        self.sent_calls: list[tuple[str, str]] = []  # (call id, arguments sent so far)

    def feed(self, text: str, final: bool = False) -> list[dict]:
        self.text += text
        parsed = self.parser.parse(self.text, final)
        deltas = []
        if parsed.content.startswith(self.sent_content) and len(parsed.content) > len(self.sent_content):
            deltas.append({"content": parsed.content[len(self.sent_content):]})
            self.sent_content = parsed.content
        for index, call in enumerate(parsed.calls):
            delta = self._call_delta(index, call)
            if delta is None:
                break
            if delta:
                deltas.append({"tool_calls": [delta]})
        return deltas

    def _call_delta(self, index: int, call: ParsedCall) -> dict | None:
        """None: this call cannot start yet (no name); {}: nothing new."""
        if index == len(self.sent_calls):
            if call.name is None:
                return None
            call_id = make_call_id()
            self.sent_calls.append((call_id, call.arguments))
            return {"index": index, **format_tool_call(call, call_id)}
        call_id, sent = self.sent_calls[index]
        if not call.arguments.startswith(sent) or len(call.arguments) == len(sent):
            return {}
        self.sent_calls[index] = (call_id, call.arguments)
        return {"index": index, "function": {"arguments": call.arguments[len(sent):]}}
