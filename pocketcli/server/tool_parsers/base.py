"""What every tool-call parser shares: the parsed call, the parse result, and reading call objects out of text
that may still be growing (streaming), so the same code serves final responses and SSE deltas."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

ARGUMENT_KEYS = ("arguments", "parameters")  # Hermes/Qwen/Mistral say "arguments", Llama 3 "parameters"
_NAME_RE = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS_RE = re.compile(r'"(?:arguments|parameters)"\s*:\s*')
_DECODER = json.JSONDecoder()


@dataclass
class ParsedCall:
    name: str | None  # None until the name is complete
    arguments: str = ""  # JSON text of the arguments (a prefix of it while `is_complete` is False)
    is_complete: bool = False


@dataclass
class ToolParse:
    content: str  # text outside the tool calls that is safe to show now
    calls: list[ParsedCall] = field(default_factory=list)


class ToolParser:
    """Base: subclasses say where calls start (`split`) and how the call region is read (`read_calls`)."""
    name = "base"

    def parse(self, text: str, final: bool = True) -> ToolParse:
        """Content and calls in `text`. With `final` False the text may still grow: a partial start marker is
        held back from content and the last call may be incomplete. A final parse with an unreadable call
        returns the whole text as content (nothing is lost, nothing half-parsed leaks into tool_calls)."""
        content, region = self.split(text, final)
        if region is None:
            return ToolParse(content)
        calls = self.read_calls(region)
        if final and (not calls or not all(c.is_complete and c.name for c in calls)):
            return ToolParse(text)
        return ToolParse(content, calls)

    def split(self, text: str, final: bool) -> tuple[str, str | None]:
        """(content before the calls, the call region or None when no call has started)."""
        raise NotImplementedError

    def read_calls(self, region: str) -> list[ParsedCall]:
        raise NotImplementedError


def split_at_markers(text: str, markers: tuple[str, ...], final: bool) -> tuple[str, str | None]:
    """Content before the first marker and the region from it on; while streaming, a suffix that could be the
    start of a marker is held back."""
    hits = [i for i in (text.find(m) for m in markers) if i >= 0]
    if hits:
        first = min(hits)
        return text[:first], text[first:]
    if final:
        return text, None
    return text[:len(text) - partial_suffix_length(text, markers)], None


def partial_suffix_length(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `markers`."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


def read_call_object(text: str) -> tuple[ParsedCall, int | None]:
    """One `{"name": ..., "arguments": {...}}` object at the start of `text` (which may be cut short).
    Returns the call and the index just past the object, or None when the object is not complete yet."""
    try:
        obj, end = _DECODER.raw_decode(text)
    except ValueError:
        obj, end = None, None
    args_text, args_span = _raw_arguments(text)
    outside = text[:args_span[0]] + text[args_span[1]:] if args_span else text
    name_match = _NAME_RE.search(outside)
    name = json.loads(f'"{name_match.group(1)}"') if name_match else None
    if end is None or not isinstance(obj, dict):
        return ParsedCall(name, args_text if _streams(args_text) else ""), None
    name = obj.get("name") if isinstance(obj.get("name"), str) else None
    return ParsedCall(name, _final_arguments(obj, args_text), is_complete=name is not None), end


def _raw_arguments(text: str) -> tuple[str, tuple[int, int] | None]:
    """The arguments value as written (a prefix while incomplete) and its span in `text`."""
    match = _ARGS_RE.search(text)
    if match is None:
        return "", None
    start = match.end()
    try:
        _, end = _DECODER.raw_decode(text, start)
    except ValueError:
        return text[start:], (start, len(text))
    return text[start:end], (start, end)


def _streams(args_text: str) -> bool:
    """Object or array arguments can be streamed as they grow: every prefix is inside the value."""
    return args_text[:1] in ("{", "[")


def _final_arguments(obj: dict, raw: str) -> str:
    value = next((obj[k] for k in ARGUMENT_KEYS if k in obj), {})
    if isinstance(value, str):  # some models write the arguments as a JSON string
        return value
    return raw if _streams(raw) else json.dumps(value, ensure_ascii=False)


def read_call_sequence(region: str, separators: str = " \t\r\n,;[]") -> list[ParsedCall]:
    """Call objects one after another (a JSON array, or `;`-separated); stops at the first incomplete one."""
    calls, pos = [], 0
    while pos < len(region):
        if region[pos] in separators:
            pos += 1
            continue
        if region[pos] != "{":
            break
        call, end = read_call_object(region[pos:])
        calls.append(call)
        if end is None:
            break
        pos += end
    return calls
