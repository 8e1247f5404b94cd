"""Running a \\p{..} regex with Python's `re`: every non-ASCII character is collapsed to one stand-in
character per Unicode class, and each \\p{X} in the pattern becomes a class of that stand-in plus the
ASCII members of X. This matches llama.cpp's std::regex fallback for pre-tokenizer regexes.
"""
import functools
import re

from .codepoint_flags import LETTER, MARK, NUMBER, PUNCTUATION, SYMBOL, WHITESPACE, codepoint_flags

_STAND_IN_OF_CLASS = {NUMBER: "\xd1", LETTER: "\xd2", PUNCTUATION: "\xd3", MARK: "\xd4", SYMBOL: "\xd5"}
_OTHER_STAND_IN = "\xd0"
_WHITESPACE_STAND_IN = "\x0b"  # the regex engine runs in ASCII mode, where \s sees only ASCII whitespace

_ASCII_MEMBERS = {
    NUMBER: "0-9",
    LETTER: "A-Za-z",
    PUNCTUATION: "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}",
    MARK: "",
    SYMBOL: "\\$\\+<->\\^`\\|~",
}
_CLASS_OF_PROPERTY = {"N": NUMBER, "L": LETTER, "P": PUNCTUATION, "M": MARK, "S": SYMBOL,
                      "Lu": LETTER, "Ll": LETTER, "Lt": LETTER, "Lm": LETTER, "Lo": LETTER}
_PROPERTY = re.compile(r"\\p\{(\w+)\}")


def _stand_in(char: str) -> str:
    if char.isascii():
        return char
    flags = codepoint_flags(char)
    if flags & WHITESPACE:
        return _WHITESPACE_STAND_IN
    return _STAND_IN_OF_CLASS.get(flags & 0xFF, _OTHER_STAND_IN)


def collapse_text(text: str) -> str:
    """`text` with each non-ASCII character replaced by its class stand-in (same length)."""
    return "".join(map(_stand_in, text))


@functools.lru_cache(maxsize=64)
def compile_collapsed(pattern: str) -> re.Pattern:
    """Compile a pattern that may use \\p{..} classes against collapsed text."""
    pieces, inside_class, pos = [], False, 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\" and pos + 1 < len(pattern) and pattern[pos + 1] != "p":
            pieces.append(pattern[pos:pos + 2])
            pos += 2
            continue
        match = _PROPERTY.match(pattern, pos)
        if match:
            members = _class_members(match.group(1))
            pieces.append(members if inside_class else f"[{members}]")
            pos = match.end()
            continue
        inside_class = {"[": True, "]": False}.get(char, inside_class)
        pieces.append(char)
        pos += 1
    return re.compile("".join(pieces), re.ASCII)


def _class_members(property_name: str) -> str:
    unicode_class = _CLASS_OF_PROPERTY[property_name]
    return _STAND_IN_OF_CLASS[unicode_class] + _ASCII_MEMBERS[unicode_class]


def split_by_regex(collapsed: str, pattern: re.Pattern) -> list[int]:
    """End offsets of the pieces of `collapsed`: every match and every gap between matches."""
    ends, last_end = [], 0
    for match in pattern.finditer(collapsed):
        if match.start() > last_end:
            ends.append(match.start())
        if match.end() > match.start():
            ends.append(match.end())
        last_end = match.end()
    if last_end < len(collapsed):
        ends.append(len(collapsed))
    return ends
