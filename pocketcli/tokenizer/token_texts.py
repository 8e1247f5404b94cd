"""The text of every token, read on demand from the metadata's string array (or list); an empty text reads as
"[EMPTY_<id>]", as llama.cpp names it."""
from __future__ import annotations

from collections.abc import Sequence


class TokenTexts(Sequence):
    def __init__(self, texts: Sequence[str]):
        self._texts = texts  # a GGUF StringArray (decoded per access) or a list of str
        find_empty = getattr(texts, "empty_indices", None)
        empty_ids = find_empty() if find_empty else [i for i, text in enumerate(texts) if not text]
        self._empty_ids = frozenset(empty_ids)

    def __len__(self) -> int:
        return len(self._texts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        text = self._texts[index]
        return text or f"[EMPTY_{index % len(self._texts)}]"

    def __iter__(self):
        if not self._empty_ids:
            return iter(self._texts)
        return (text or f"[EMPTY_{i}]" for i, text in enumerate(self._texts))

    def __eq__(self, other) -> bool:
        if isinstance(other, TokenTexts):
            return self._empty_ids == other._empty_ids and self._texts == other._texts
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def indices_containing(self, part: str) -> list[int]:
        """Ids whose text holds `part` (a GGUF string array searches its bytes without decoding)."""
        search = getattr(self._texts, "indices_containing", None)
        if search is not None:
            return search(part)
        return [i for i, text in enumerate(self) if part in text]

    def __repr__(self) -> str:
        return f"TokenTexts({len(self)} tokens)"
