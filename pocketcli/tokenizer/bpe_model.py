"""Byte-level BPE (llama.cpp's llm_tokenizer_bpe): pre-tokenizer words, GPT-2 byte mapping, then rank-ordered
merges inside each word. The merging runs in HF `tokenizers` (same lowest-rank-then-leftmost rule, in Rust)."""
from collections.abc import Mapping

from .byte_encoding import encode_bytes
from .pre_tokenizer import split_words
from .vocab import Vocab

_MAX_CACHED_WORDS = 200_000


def parse_merge(merge: str) -> tuple[str, str] | None:
    """'a b' -> ('a', 'b'), splitting at the first space after the first character (llama.cpp's rule)."""
    split_at = merge.find(" ", 1)
    return (merge[:split_at], merge[split_at + 1:]) if split_at > 0 else None


class BpeModel:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.token_to_id = vocab.token_to_id
        self.ignore_merges = vocab.pre.ignore_merges
        self.regexes = vocab.pre.regexes
        self._merge_word = self._make_word_merger(vocab)
        self._word_cache: dict[str, list[int]] = {}

    def _make_word_merger(self, vocab: Vocab):
        pairs = [p for p in map(parse_merge, vocab.merges) if p is not None]
        try:
            from tokenizers.models import BPE
        except ImportError:  # pure-Python merging: same result, slower
            return PythonBpeMerger(pairs, self.token_to_id).merge
        known = dict(self.token_to_id.items())  # HF copies the vocabulary into Rust; this dict is dropped after
        # first rank wins for repeated pairs; HF refuses merges whose parts or result are not tokens
        usable = [p for p in dict.fromkeys(pairs) if p[0] in known and p[1] in known and p[0] + p[1] in known]
        model = BPE(vocab=known, merges=usable, dropout=None, fuse_unk=False, byte_fallback=False)
        return lambda word: [token.id for token in model.tokenize(word)]

    def encode(self, text: str) -> list[int]:
        """Token ids of one raw fragment."""
        ids: list[int] = []
        cache = self._word_cache
        for word in split_words(text, self.regexes):
            word_ids = cache.get(word)
            if word_ids is None:
                word_ids = self._encode_word(word)
                if len(cache) < _MAX_CACHED_WORDS:
                    cache[word] = word_ids
            ids.extend(word_ids)
        return ids

    def _encode_word(self, word: str) -> list[int]:
        encoded = encode_bytes(word)
        if self.ignore_merges and encoded in self.token_to_id:
            return [self.token_to_id[encoded]]
        return self._merge_word(encoded)


class PythonBpeMerger:
    """Reference merging: repeatedly join the lowest-ranked adjacent pair, leftmost first."""

    def __init__(self, pairs: list[tuple[str, str]], token_to_id: Mapping[str, int]):
        self.ranks = {}
        for rank, pair in enumerate(pairs):
            self.ranks.setdefault(pair, rank)
        self.token_to_id = token_to_id

    def merge(self, word: str) -> list[int]:
        symbols = list(word)
        while len(symbols) > 1:
            best = min(((self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))
                        if (a, b) in self.ranks), default=None)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        return self._symbol_ids(symbols)

    def _symbol_ids(self, symbols: list[str]) -> list[int]:
        ids = []
        for symbol in symbols:
            if symbol in self.token_to_id:
                ids.append(self.token_to_id[symbol])
            else:  # llama.cpp falls back to single-byte tokens and drops what it cannot find
                ids.extend(self.token_to_id[c] for c in symbol if c in self.token_to_id)
        return ids

