"""A tokenizer.json (Hugging Face `tokenizers`) behind the interface of our GGUF Tokenizer."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .byte_encoding import decode_token_text
from .errors import TokenizerError

SPACE_MARK = "\u2581"
# llama.cpp's end-of-generation texts, added to EOS when the vocabulary has them
EOG_TEXTS = ("<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>")


@dataclass(frozen=True)
class HFVocabInfo:
    """What the streaming detokenizer asks of `tokenizer.vocab`."""
    add_space_prefix: bool
    size: int


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: not valid JSON ({exc})") from None


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _components(spec: dict | None) -> list[dict]:
    """A tokenizer.json pipeline stage as a flat list (Sequence stages unpacked)."""
    if not spec:
        return []
    inner = spec.get("decoders") or spec.get("pretokenizers") or spec.get("normalizers")
    return [c for s in inner for c in _components(s)] if spec.get("type") == "Sequence" and inner else [spec]


class HFTokenizer:
    def __init__(self, model_dir: str | Path):
        from tokenizers import Tokenizer as RustTokenizer

        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.exists():
            raise TokenizerError(f"{model_dir}: no tokenizer.json")
        spec = _read_json(path)
        try:
            self._tok = RustTokenizer.from_file(str(path))
        except Exception as exc:  # the Rust library raises a bare Exception on malformed files
            raise TokenizerError(f"{path}: cannot load tokenizer ({exc})") from None
        config = _read_json(model_dir / "tokenizer_config.json")
        generation = _read_json(model_dir / "generation_config.json")
        decoders = _components(spec.get("decoder"))
        self._byte_level = any(d.get("type") == "ByteLevel" for d in decoders)
        strips = any(d.get("type") == "Strip" and d.get("start") for d in decoders) or any(
            d.get("type") == "Metaspace" and d.get("prepend_scheme", "always") != "never" for d in decoders)
        self.vocab = HFVocabInfo(add_space_prefix=strips, size=self._tok.get_vocab_size(with_added_tokens=True))
        self._special_ids = {t["id"] for t in spec.get("added_tokens") or [] if t.get("special")}
        self._bos_id = self._id_of(_token_text(config.get("bos_token")))
        self._eos_id = self._id_of(_token_text(config.get("eos_token")))
        self._stop_ids = self._collect_stop_ids(generation)
        probe = self._tok.encode("a", add_special_tokens=True).ids
        self._add_bos = self._bos_id is not None and probe[:1] == [self._bos_id]
        self._piece_cache: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "HFTokenizer":
        return cls(model_dir)

    def _id_of(self, text: str | None) -> int | None:
        return None if text is None else self._tok.token_to_id(text)

    def _collect_stop_ids(self, generation: dict) -> list[int]:
        ids = {self._eos_id} if self._eos_id is not None else set()
        eos = generation.get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
        ids.update(i for t in EOG_TEXTS if (i := self._tok.token_to_id(t)) is not None and i in self._special_ids)
        return sorted(ids)

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def bos_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_id(self) -> int | None:
        return self._eos_id

    @property
    def add_bos(self) -> bool:
        return self._add_bos

    @property
    def stop_token_ids(self) -> list[int]:
        return list(self._stop_ids)

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def is_control(self, token_id: int) -> bool:
        return token_id in self._special_ids

    # -- encoding / decoding -----------------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        self._tok.encode_special_tokens = not parse_special
        try:
            return self._tok.encode(text, add_special_tokens=add_special).ids
        finally:
            self._tok.encode_special_tokens = False

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """Bytes of one token; special tokens give b'' unless `special` asks for their text."""
        cache = self._piece_cache[special]
        piece = cache.get(token_id)
        if piece is None:
            piece = cache[token_id] = self._render_piece(token_id, special)
        return piece

    def _render_piece(self, token_id: int, special: bool) -> bytes:
        text = self._tok.id_to_token(token_id)
        if text is None:
            return b""
        if token_id in self._special_ids:
            return text.encode("utf-8") if special else b""
        if self._byte_level:
            return decode_token_text(text)
        if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            return bytes([int(text[3:5], 16)])
        return text.replace(SPACE_MARK, " ").encode("utf-8")

    def decode_bytes(self, ids: list[int], skip_special: bool = False) -> bytes:
        return self.decode(ids, skip_special).encode("utf-8")

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)
