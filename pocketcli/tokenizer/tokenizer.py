"""Text <-> token ids for a GGUF vocabulary, with llama.cpp's llama_tokenize / token_to_piece / detokenize rules."""
from .bpe_model import BpeModel
from .byte_encoding import decode_token_text
from .errors import TokenizerError
from .special_splitter import SpecialSplitter
from .spm_model import SPACE_MARK, SpmModel
from .token_attr import HIDDEN_ATTRS, SPECIAL_ATTRS, TokenAttr
from .vocab import Vocab


class Tokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.splitter = SpecialSplitter(vocab)
        self.model = SpmModel(vocab) if vocab.kind == "spm" else BpeModel(vocab)
        self._piece_cache: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})  # (plain, special rendering)

    @classmethod
    def from_gguf_metadata(cls, metadata: dict) -> "Tokenizer":
        return cls(Vocab.from_metadata(metadata))

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def bos_id(self) -> int | None:
        return self.vocab.special_ids["bos"]

    @property
    def eos_id(self) -> int | None:
        return self.vocab.special_ids["eos"]

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def stop_token_ids(self) -> list[int]:
        """End-of-generation ids: EOS plus EOT/EOM-like tokens (llama.cpp's EOG set)."""
        return sorted(self.vocab.eog_ids)

    def is_special(self, token_id: int) -> bool:
        """Control, user-defined or unknown token (one that raw-text splitting treats specially)."""
        return bool(self.vocab.attr(token_id) & SPECIAL_ATTRS)

    def is_control(self, token_id: int) -> bool:
        return bool(self.vocab.attr(token_id) & TokenAttr.CONTROL)

    # -- encoding ----------------------------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """llama_tokenize(text, add_special, parse_special)."""
        vocab = self.vocab
        ids: list[int] = []
        if add_special and vocab.add_bos:
            ids.append(self._required_id("bos"))
        ids.extend(self._encode_fragments(self.splitter.split(text, parse_special)))
        if add_special and vocab.add_eos:
            ids.append(self._required_id("eos"))
        return ids

    def _required_id(self, name: str) -> int:
        token_id = self.vocab.special_ids[name]
        if token_id is None:
            raise TokenizerError(f"vocabulary asks for a {name.upper()} token (add_{name}_token) but has none")
        return token_id

    def _encode_fragments(self, fragments: list) -> list[int]:
        ids: list[int] = []
        spm = self.vocab.kind == "spm"
        prefix_space = spm and self.vocab.add_space_prefix
        after_special = True  # SPM adds its space prefix at the start and after every special token
        for fragment in fragments:
            if isinstance(fragment, int):
                ids.append(fragment)
                after_special = True
            elif spm:
                text = " " + fragment if prefix_space and after_special else fragment
                ids.extend(self.model.encode(text.replace(" ", SPACE_MARK)))
                after_special = False
            else:
                ids.extend(self.model.encode(fragment))
        return ids

    # -- decoding ----------------------------------------------------------------------------------------------
    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """Bytes of one token: byte tokens give their byte, ▁ gives a space, and control tokens give b''
        unless `special` asks for their text."""
        cache = self._piece_cache[special]
        piece = cache.get(token_id)
        if piece is None:
            piece = cache[token_id] = self._render_piece(token_id, special)
        return piece

    def _render_piece(self, token_id: int, special: bool) -> bytes:
        attr, text = self.vocab.attr(token_id), self.vocab.tokens[token_id]
        if attr & HIDDEN_ATTRS and not special:
            return b""
        if attr & SPECIAL_ATTRS:
            return text.encode("utf-8")
        if attr & TokenAttr.NORMAL and self.vocab.kind == "spm":
            return text.replace(SPACE_MARK, " ").encode("utf-8")
        if attr & TokenAttr.NORMAL:
            return decode_token_text(text)
        if attr & TokenAttr.BYTE:
            return bytes([int(text[3:5], 16)])
        return b""

    def decode_bytes(self, ids: list[int], skip_special: bool = False) -> bytes:
        """llama_detokenize(ids, remove_special=False, unparse_special=not skip_special), as bytes."""
        pieces = [self.token_to_piece(i, special=not skip_special) for i in ids]
        if pieces and self.vocab.add_space_prefix and pieces[0].startswith(b" "):
            pieces[0] = pieces[0][1:]  # the space the SPM encoder put in front of the text
        data = b"".join(pieces)
        return clean_up_spaces(data) if self.vocab.clean_spaces else data

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        """Text of `ids`; control tokens render as their text unless `skip_special`."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")


def clean_up_spaces(data: bytes) -> bytes:
    """llama.cpp's clean_spaces pass: drop the space before ? ! . , and before 's 'm 're 've, and the spaces
    around a lone apostrophe."""
    text = data.decode("latin-1")  # byte-preserving; every rule below is ASCII
    for punct in "?!.,":
        text = text.replace(" " + punct, punct)
    text = text.replace(" ' ", "'")
    for suffix in ("'s", "'m", "'re", "'ve"):
        text = text.replace(" " + suffix, suffix)
    return text.encode("latin-1")
