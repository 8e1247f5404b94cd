"""Splitting special-token texts out of raw text before the model runs (llama.cpp's tokenizer_st_partition).

Special tokens are tried longest first; each one is cut out of every raw fragment left by the longer ones.
Control and unknown tokens are cut only when `parse_special` is set; user-defined tokens always are.
"""
from .token_attr import HIDDEN_ATTRS
from .vocab import Vocab

Fragment = str | int  # raw text, or a token id already decided


class SpecialSplitter:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._ids_by_prefix = self._index_by_prefix(vocab)
        self._rank = {token_id: rank for rank, token_id in enumerate(vocab.special_ids_longest_first)}

    @staticmethod
    def _index_by_prefix(vocab: Vocab) -> dict[str, list[int]]:
        """Special ids grouped by their first two characters (one for one-character tokens)."""
        groups: dict[str, list[int]] = {}
        for token_id in vocab.special_ids_longest_first:
            groups.setdefault(vocab.tokens[token_id][:2], []).append(token_id)
        return groups

    def split(self, text: str, parse_special: bool) -> list[Fragment]:
        """`text` as raw-text fragments and special-token ids, in order."""
        if not text:
            return []
        fragments: list[Fragment] = [text]
        for token_id in self._candidates(text, parse_special):
            fragments = self._cut_token(fragments, token_id)
        return fragments

    def _candidates(self, text: str, parse_special: bool) -> list[int]:
        """Special ids whose text occurs in `text`, in the order llama.cpp tries them."""
        prefixes = {text[i:i + 2] for i in range(len(text))}.union(text)
        found = [token_id for prefix in prefixes.intersection(self._ids_by_prefix)
                 for token_id in self._ids_by_prefix[prefix] if self.vocab.tokens[token_id] in text]
        if not parse_special:
            attrs = self.vocab.attrs
            found = [token_id for token_id in found if not attrs[token_id] & HIDDEN_ATTRS]
        return sorted(found, key=self._rank.__getitem__) if len(found) > 1 else found

    def _cut_token(self, fragments: list[Fragment], token_id: int) -> list[Fragment]:
        token_text = self.vocab.tokens[token_id]
        result: list[Fragment] = []
        for fragment in fragments:
            if isinstance(fragment, int) or token_text not in fragment:
                result.append(fragment)
                continue
            pieces = fragment.split(token_text)
            for index, piece in enumerate(pieces):
                if index:
                    result.append(token_id)
                if piece:
                    result.append(piece)
        return result
