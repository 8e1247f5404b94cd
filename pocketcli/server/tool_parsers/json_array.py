"""`tool_choice: "required"`: the grammar makes the reply a JSON array of `{"name", "arguments"}` objects."""
from __future__ import annotations

from .base import ParsedCall, ToolParser, read_call_sequence


class JsonArrayToolParser(ToolParser):
    name = "json_array"

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        return "", text

    def read_calls(self, region: str) -> list[ParsedCall]:
        return read_call_sequence(region)


class NamedToolParser(ToolParser):
    """`tool_choice: {"type": "function", "function": {"name": N}}`: the reply is N's arguments object."""
    name = "named"

    def __init__(self, function_name: str):
        self.function_name = function_name

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        return "", text

    def read_calls(self, region: str) -> list[ParsedCall]:
        arguments = region.strip()
        return [ParsedCall(self.function_name, arguments, is_complete=_is_json(arguments))]


def _is_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    return True
