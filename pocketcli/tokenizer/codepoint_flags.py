"""Unicode class flags of a codepoint, as llama.cpp's pre-tokenizers see them (\\p{L}, \\p{N}, \\s, ...)."""
import unicodedata

UNDEFINED = 0x0001
NUMBER = 0x0002
LETTER = 0x0004
SEPARATOR = 0x0008
MARK = 0x0010
PUNCTUATION = 0x0020
SYMBOL = 0x0040
CONTROL = 0x0080
WHITESPACE = 0x0100

_FLAG_OF_CATEGORY_CLASS = {"N": NUMBER, "L": LETTER, "Z": SEPARATOR, "M": MARK, "P": PUNCTUATION,
                           "S": SYMBOL, "C": CONTROL}

# llama.cpp's fixed whitespace set (\s), wider than str.isspace() on some controls and narrower on others
WHITESPACE_CHARS = frozenset(
    [chr(c) for c in range(0x09, 0x0E)] + [chr(c) for c in range(0x2000, 0x200B)]
    + [chr(c) for c in (0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)])

_flags_cache: dict[str, int] = {}


def codepoint_flags(char: str) -> int:
    """Flags of one character; the category comes from this Python's unicodedata (Unicode 14 on 3.11)."""
    flags = _flags_cache.get(char)
    if flags is None:
        category = unicodedata.category(char)
        flags = UNDEFINED if category == "Cn" else _FLAG_OF_CATEGORY_CLASS[category[0]]
        if char in WHITESPACE_CHARS:
            flags |= WHITESPACE
        _flags_cache[char] = flags
    return flags


def text_flags(text: str) -> list[int]:
    """Flags of every character of `text`, in order."""
    cache = _flags_cache
    return [cache.get(c) or codepoint_flags(c) for c in text]
