"""Incremental detokenization for streaming: text comes out as soon as it is complete UTF-8, never split
inside a character (byte tokens of one emoji or CJK character are held back until the last one arrives)."""


def incomplete_tail_length(data: bytes) -> int:
    """Number of bytes at the end of `data` that start a UTF-8 sequence not yet complete (0 to 3)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its sequence longer than what we have?
            needed = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return back if needed > back else 0
    return 0


class StreamingDetokenizer:
    """Feed token ids one at a time; each call returns only the newly completed text."""

    def __init__(self, tokenizer, render_special: bool = False, strip_leading_space: bool | None = None):
        self.tokenizer = tokenizer
        self.render_special = render_special  # control tokens render as empty text unless asked
        # like decode(): drop the space an SPM vocab with add_space_prefix puts before the first word
        self.strip_leading_space = (tokenizer.vocab.add_space_prefix if strip_leading_space is None
                                    else strip_leading_space)
        self._pending = b""
        self._is_first = True
        self.text = ""  # everything returned so far

    def add_token(self, token_id: int) -> str:
        piece = self.tokenizer.token_to_piece(token_id, special=self.render_special)
        if self._is_first:
            self._is_first = False
            if self.strip_leading_space and piece.startswith(b" "):
                piece = piece[1:]
        self._pending += piece
        held = incomplete_tail_length(self._pending)
        ready = self._pending[:len(self._pending) - held]
        self._pending = self._pending[len(ready):]
        return self._emit(ready)

    def flush(self) -> str:
        """Whatever is still held back (an unfinished character becomes U+FFFD)."""
        ready, self._pending = self._pending, b""
        return self._emit(ready)

    def _emit(self, ready: bytes) -> str:
        text = ready.decode("utf-8", errors="replace")
        self.text += text
        return text
