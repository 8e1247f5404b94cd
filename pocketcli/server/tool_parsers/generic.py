"""Fallback for models without a known format: `<tool_call>` blocks, a ```json fenced call, or a reply that is a
bare JSON call object / array of them (keys "name" and "arguments" or "parameters")."""
from __future__ import annotations

from .base import ParsedCall, ToolParser, read_call_sequence, split_at_markers
from .hermes import START as TOOL_CALL_START
from .hermes import HermesToolParser

FENCE = "```json"


class GenericToolParser(ToolParser):
    name = "generic"

    def __init__(self):
        self.hermes = HermesToolParser()

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            return "", stripped
        if not final and not stripped:
            return "", None
        return split_at_markers(text, (TOOL_CALL_START, FENCE), final)

    def read_calls(self, region: str) -> list[ParsedCall]:
        if region.startswith(TOOL_CALL_START):
            return self.hermes.read_calls(region)
        body = region.removeprefix(FENCE)
        return read_call_sequence(body.split("```", 1)[0])
