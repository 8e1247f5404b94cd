"""Llama 3.1+ JSON tool calls: the reply *is* `{"name": ..., "parameters": {...}}` (optionally after
`<|python_tag|>`; several calls separated by `;`). A reply that starts with anything else is plain content."""
from __future__ import annotations

from .base import ParsedCall, ToolParser, read_call_sequence

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(ToolParser):
    name = "llama3_json"

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        stripped = text.lstrip()
        if stripped.startswith(PYTHON_TAG):
            return "", stripped[len(PYTHON_TAG):]
        if stripped.startswith("{"):
            return "", stripped
        if not final and PYTHON_TAG.startswith(stripped):  # nothing yet, or a partial tag: wait
            return "", None
        return text, None

    def read_calls(self, region: str) -> list[ParsedCall]:
        return read_call_sequence(region, separators=" \t\r\n;")
