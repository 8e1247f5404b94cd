"""Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, and the newer (v11+ tokenizer) form
`[TOOL_CALLS]name[ARGS]{...}`, repeated per call. [TOOL_CALLS] is a control token that a text detokenizer may
hide, so a reply that starts with a JSON array of calls is read the same way."""
from __future__ import annotations

import json

from .base import ParsedCall, ToolParser, read_call_sequence, split_at_markers

MARKER = "[TOOL_CALLS]"
ARGS_MARKER = "[ARGS]"
_DECODER = json.JSONDecoder()


class MistralToolParser(ToolParser):
    name = "mistral"

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        stripped = text.lstrip()
        if stripped.startswith("[{") or (not final and stripped == "["):
            return "", stripped
        return split_at_markers(text, (MARKER,), final)

    def read_calls(self, region: str) -> list[ParsedCall]:
        body = region.removeprefix(MARKER).lstrip()
        if body[:1] in ("[", "{") or not body:
            return read_call_sequence(body)
        return read_name_args_calls(body)


def read_name_args_calls(body: str) -> list[ParsedCall]:
    """`name[ARGS]{...}` calls, each after the first behind its own [TOOL_CALLS]; stops at an incomplete one."""
    calls = []
    for part in body.split(MARKER):
        name, found, args = part.strip().partition(ARGS_MARKER)
        if not found:  # the name is still arriving
            calls.append(ParsedCall(None))
            break
        args = args.lstrip()
        try:
            value, end = _DECODER.raw_decode(args)
        except ValueError:
            calls.append(ParsedCall(name.strip(), args if args[:1] == "{" else ""))
            break
        calls.append(ParsedCall(name.strip(), args[:end], is_complete=isinstance(value, dict) and bool(name.strip())))
    return calls
