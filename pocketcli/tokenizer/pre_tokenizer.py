"""BPE pre-tokenizers: the one table from `tokenizer.ggml.pre` to regexes, and the word splitting they drive.

Regexes are applied in order, each one splitting the pieces left by the previous one, like llama.cpp.
The common ones run through hand-written matchers (word_splitters); any other goes through `re` on
class-collapsed text (collapsed_regex).
"""
import functools
import re
from dataclasses import dataclass

from .codepoint_flags import LETTER, MARK, WHITESPACE_CHARS, text_flags
from .collapsed_regex import collapse_text, compile_collapsed, split_by_regex
from .errors import TokenizerError
from .word_splitters import split_gpt2, split_llama3_like

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
STARCODER_REGEXES = (r"\p{N}", GPT2_REGEX)
DEFAULT_REGEXES = (r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]")


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How one `tokenizer.ggml.pre` value splits text, and the vocab defaults llama.cpp ties to it."""
    regexes: tuple[str, ...]
    clean_spaces: bool = True  # detokenizer removes spaces before punctuation (HF clean_up_tokenization_spaces)
    ignore_merges: bool = False  # a word that is itself a token is taken whole
    add_bos: bool | None = None  # default for add_bos when the file does not say


_LLAMA3 = PreTokenizerSpec((LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizerSpec((QWEN2_REGEX,), clean_spaces=False)
_GPT2 = PreTokenizerSpec((GPT2_REGEX,))
_STARCODER = PreTokenizerSpec(STARCODER_REGEXES)

PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    "default": PreTokenizerSpec(DEFAULT_REGEXES),
    "gpt-2": _GPT2, "gpt2": _GPT2, "phi-2": _GPT2, "mpt": _GPT2, "olmo": _GPT2, "jais": _GPT2,
    "llama3": _LLAMA3, "llama-v3": _LLAMA3, "llama-bpe": _LLAMA3, "falcon3": _LLAMA3, "pixtral": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "stablelm2": PreTokenizerSpec((QWEN2_REGEX,)),
    "qwen35": PreTokenizerSpec((QWEN35_REGEX,), clean_spaces=False),
    "starcoder": _STARCODER, "refact": _STARCODER,
    "smollm": PreTokenizerSpec(STARCODER_REGEXES, clean_spaces=False),
    "command-r": PreTokenizerSpec(STARCODER_REGEXES, clean_spaces=False),
}


def find_pre_tokenizer(name: str | None) -> PreTokenizerSpec:
    """The spec for a `tokenizer.ggml.pre` value; a missing value means `default`, like llama.cpp."""
    spec = PRE_TOKENIZERS.get(name or "default")
    if spec is None:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise TokenizerError(f"unknown BPE pre-tokenizer type {name!r} (tokenizer.ggml.pre); known: {known}")
    return spec


_MATCHERS = {
    GPT2_REGEX: split_gpt2,
    LLAMA3_REGEX: functools.partial(split_llama3_like, max_digits=3),
    QWEN2_REGEX: functools.partial(split_llama3_like, max_digits=1),
    QWEN35_REGEX: functools.partial(split_llama3_like, max_digits=1, letter_mask=LETTER | MARK),
}
_PADDING = [0, 0, 0]  # out-of-range flags after a chunk, read by the look-ahead of the matchers


def split_words(text: str, regexes: tuple[str, ...]) -> list[str]:
    """Split `text` into pre-tokenizer words by applying each regex to the pieces of the previous one."""
    if not text:
        return []
    ends = [len(text)]
    flags, views = None, {}
    for pattern in regexes:
        matcher = _MATCHERS.get(pattern)
        if matcher is not None:
            flags = flags or text_flags(text)
            ends = _split_pieces(ends, lambda lo, hi: matcher(text[lo:hi], flags[lo:hi] + _PADDING))
            continue
        uses_classes = "\\p{" in pattern
        if uses_classes not in views:
            views[uses_classes] = _regex_view(text, uses_classes)
        view, compiled = views[uses_classes], _compile(pattern, uses_classes)
        ends = _split_pieces(ends, lambda lo, hi: split_by_regex(view[lo:hi], compiled))
    starts = [0] + ends[:-1]
    return [text[lo:hi] for lo, hi in zip(starts, ends)]


def _split_pieces(ends: list[int], split_piece) -> list[int]:
    new_ends, start = [], 0
    for end in ends:
        new_ends.extend(start + offset for offset in split_piece(start, end))
        start = end
    return new_ends


def _regex_view(text: str, uses_classes: bool) -> str:
    if uses_classes:
        return collapse_text(text)
    return "".join("\x0b" if not c.isascii() and c in WHITESPACE_CHARS else c for c in text)


def _compile(pattern: str, uses_classes: bool) -> re.Pattern:
    return compile_collapsed(pattern) if uses_classes else re.compile(pattern, re.ASCII)
