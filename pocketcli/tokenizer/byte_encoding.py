"""GPT-2's reversible byte <-> printable-unicode mapping used by byte-level BPE vocabularies."""


def _printable_bytes() -> list[int]:
    return [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]


def make_byte_to_unicode() -> dict[int, str]:
    """byte -> character: printable Latin-1 bytes map to themselves, the rest to U+0100 onwards."""
    printable = _printable_bytes()
    mapping = {b: chr(b) for b in printable}
    next_codepoint = 256
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(next_codepoint)
            next_codepoint += 1
    return mapping


BYTE_TO_UNICODE = make_byte_to_unicode()
UNICODE_TO_BYTE = {char: b for b, char in BYTE_TO_UNICODE.items()}
# str.translate table for text that was decoded from UTF-8 bytes as Latin-1
LATIN1_TO_UNICODE_TABLE = {b: char for b, char in BYTE_TO_UNICODE.items()}


def encode_bytes(text: str) -> str:
    """The byte-level form of `text`: one mapped character per UTF-8 byte."""
    return text.encode("utf-8").decode("latin-1").translate(LATIN1_TO_UNICODE_TABLE)


def decode_token_text(token_text: str) -> bytes:
    """Bytes of a byte-level token; characters outside the map render like llama.cpp's [UNK_BYTE_..]."""
    try:
        return bytes(UNICODE_TO_BYTE[c] for c in token_text)
    except KeyError:
        return b"".join(_decode_char(c, token_text) for c in token_text)


def _decode_char(char: str, token_text: str) -> bytes:
    byte = UNICODE_TO_BYTE.get(char)
    if byte is not None:
        return bytes([byte])
    return b"[UNK_BYTE_0x" + char.encode("utf-8").hex().encode() + token_text.encode("utf-8") + b"]"
