"""Tool-call parsers, one per output format, chosen by the chat template (or `pocket serve --tool-call-parser`)."""
from __future__ import annotations

from .base import ParsedCall, ToolParse, ToolParser
from .generic import GenericToolParser
from .hermes import HermesToolParser
from .json_array import JsonArrayToolParser, NamedToolParser
from .llama3 import Llama3JsonToolParser
from .mistral import MistralToolParser

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesToolParser,
    "qwen": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
    "generic": GenericToolParser,
}


def make_tool_parser(name: str) -> ToolParser:
    if name not in TOOL_PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r} (known: {', '.join(sorted(TOOL_PARSERS))})")
    return TOOL_PARSERS[name]()


def parser_name_for_template(source: str, family: str = "file") -> str:
    """The format a chat template teaches its model: look for its tool-call markers."""
    if "<tool_call>" in source or family == "chatml":
        return "hermes"
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if "<|python_tag|>" in source or "ipython" in source or family == "llama3":
        return "llama3_json"
    return "generic"


__all__ = ["TOOL_PARSERS", "GenericToolParser", "HermesToolParser", "JsonArrayToolParser", "Llama3JsonToolParser",
           "MistralToolParser", "NamedToolParser", "ParsedCall", "ToolParse", "ToolParser", "make_tool_parser",
           "parser_name_for_template"]
