"""Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`. [TOOL_CALLS] is a control token that a
text detokenizer may hide, so a reply that starts with a JSON array of calls is read the same way."""
from __future__ import annotations

from .base import ParsedCall, ToolParser, read_call_sequence, split_at_markers

MARKER = "[TOOL_CALLS]"


class MistralToolParser(ToolParser):
    name = "mistral"

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        stripped = text.lstrip()
        if stripped.startswith("[{") or (not final and stripped == "["):
            return "", stripped
        return split_at_markers(text, (MARKER,), final)

    def read_calls(self, region: str) -> list[ParsedCall]:
        return read_call_sequence(region.removeprefix(MARKER))
