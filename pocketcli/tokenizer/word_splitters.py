"""Hand-written matchers for the common BPE pre-tokenizer regexes, with llama.cpp's exact match rules.

Each splitter takes one chunk of text and its codepoint flags and returns the end offsets of its words.
They behave like the regex in their docstring, including llama.cpp's quirks (ASCII-only case folding of
contractions, its own \\s set); writing them by hand also keeps them fast without a \\p{L}-aware regex engine.
"""
from .codepoint_flags import LETTER, MARK, NUMBER, WHITESPACE

_NEWLINES = ("\r", "\n")
_SHORT_CONTRACTIONS = frozenset("stmd")
_LONG_CONTRACTIONS = frozenset({"re", "ve", "ll"})


def _contraction_length(chunk: str, pos: int, fold_case: bool) -> int:
    """Length of a 's 't 're 've 'm 'll 'd match at `pos` (0 if none)."""
    size = len(chunk)
    if chunk[pos] != "'" or pos + 1 >= size:
        return 0
    first = chunk[pos + 1]
    if fold_case and first.isascii():
        first = first.lower()
    if first in _SHORT_CONTRACTIONS:
        return 2
    if pos + 2 >= size:
        return 0
    second = chunk[pos + 2]
    if fold_case and second.isascii():
        second = second.lower()
    return 3 if first + second in _LONG_CONTRACTIONS else 0


def _whitespace_run(chunk: str, flags: list[int], pos: int) -> tuple[int, int]:
    """(length of the whitespace run at `pos`, end of its last \\r or \\n or 0)."""
    count, last_newline_end = 0, 0
    while flags[pos + count] & WHITESPACE:
        if chunk[pos + count] in _NEWLINES:
            last_newline_end = pos + count + 1
        count += 1
    return count, last_newline_end


def split_gpt2(chunk: str, flags: list[int]) -> list[int]:
    """'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)

    `flags` has one entry per character plus at least three trailing zeros (out of range).
    """
    size, pos, ends = len(chunk), 0, []
    while pos < size:
        char, flag = chunk[pos], flags[pos]
        contraction = _contraction_length(chunk, pos, fold_case=False)
        if contraction:
            pos += contraction
            ends.append(pos)
            continue
        next_flag = flags[pos + 1] if char == " " else flag
        for run_class in (LETTER, NUMBER):
            if next_flag & run_class:
                pos += char == " "
                while flags[pos] & run_class:
                    pos += 1
                break
        else:
            if next_flag and not next_flag & (WHITESPACE | LETTER | NUMBER):
                pos += char == " "
                while flags[pos] and not flags[pos] & (WHITESPACE | LETTER | NUMBER):
                    pos += 1
            else:
                pos = _gpt2_whitespace_end(chunk, flags, pos, size)
        ends.append(pos)
    return ends


def _gpt2_whitespace_end(chunk: str, flags: list[int], pos: int, size: int) -> int:
    count, _ = _whitespace_run(chunk, flags, pos)
    if count > 1 and pos + count < size:  # \s+(?!\S): leave the last space to the next word
        return pos + count - 1
    return pos + max(count, 1)


def split_llama3_like(chunk: str, flags: list[int], max_digits: int, letter_mask: int = LETTER) -> list[int]:
    """(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,max_digits}
    | ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

    llama3 uses max_digits=3, qwen2 max_digits=1; qwen35 also counts marks as letters (letter_mask).
    """
    size, pos, ends = len(chunk), 0, []
    while pos < size:
        char, flag = chunk[pos], flags[pos]
        contraction = _contraction_length(chunk, pos, fold_case=True)
        if contraction:
            pos += contraction
        elif char not in _NEWLINES and not flag & NUMBER and (flag & letter_mask or flags[pos + 1] & letter_mask):
            pos += 1
            while flags[pos] & letter_mask:
                pos += 1
        elif flag & NUMBER:
            pos = _digit_group_ends(flags, pos, max_digits, ends)
        else:
            pos = _llama3_other_end(chunk, flags, pos, size, letter_mask)
        if not ends or ends[-1] != pos:
            ends.append(pos)
    return ends


def _digit_group_ends(flags: list[int], pos: int, max_digits: int, ends: list[int]) -> int:
    start = pos
    while flags[pos] & NUMBER:
        pos += 1
        if pos - start >= max_digits:
            ends.append(pos)
            start = pos
        if max_digits == 1:
            break
    return pos


def _llama3_other_end(chunk: str, flags: list[int], pos: int, size: int, letter_mask: int) -> int:
    char, flag = chunk[pos], flags[pos]
    stop_mask = WHITESPACE | letter_mask | NUMBER
    next_flag = flags[pos + 1] if char == " " else flag
    if not next_flag & stop_mask:  # ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        pos += char == " "
        while flags[pos] and not flags[pos] & stop_mask:
            pos += 1
        while pos < size and chunk[pos] in _NEWLINES:
            pos += 1
        return pos
    count, last_newline_end = _whitespace_run(chunk, flags, pos)
    if last_newline_end:  # \s*[\r\n]+
        return last_newline_end
    if count > 1 and pos + count < size:  # \s+(?!\S)
        return pos + count - 1
    return pos + max(count, 1)
