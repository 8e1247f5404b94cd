"""Qwen / Hermes / NousResearch: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call."""
from __future__ import annotations

from .base import ParsedCall, ToolParser, read_call_object, split_at_markers

START, END = "<tool_call>", "</tool_call>"


class HermesToolParser(ToolParser):
    name = "hermes"

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        return split_at_markers(text, (START,), final)

    def read_calls(self, region: str) -> list[ParsedCall]:
        calls = []
        for block in region.split(START)[1:]:
            body = block.split(END, 1)[0].strip()
            if not body:
                continue
            call, end = read_call_object(body)
            calls.append(call)
            if end is None:
                break
        return calls
