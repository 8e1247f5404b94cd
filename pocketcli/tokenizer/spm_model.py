"""SentencePiece-style merging (llama.cpp's llm_tokenizer_spm): start from single characters and keep merging
the adjacent pair whose joined text is the highest-scoring token; leftover characters become byte tokens."""
import heapq

from .errors import TokenizerError
from .vocab import Vocab

SPACE_MARK = "\u2581"  # ▁, SentencePiece's visible space


class SpmModel:
    def __init__(self, vocab: Vocab):
        self.token_to_id = vocab.token_to_id
        self.scores = vocab.scores
        self._byte_ids = [self._byte_token(vocab, b) for b in range(256)]

    @staticmethod
    def _byte_token(vocab: Vocab, byte: int) -> int | None:
        token_id = vocab.token_to_id.get(f"<0x{byte:02X}>")
        if token_id is None and byte < 0x80:
            token_id = vocab.token_to_id.get(chr(byte))
        return token_id

    def encode(self, text: str) -> list[int]:
        """Token ids of one raw fragment whose spaces are already escaped to ▁."""
        if not text:
            return []
        sizes = self._merge(text)
        ids: list[int] = []
        start = 0
        while start < len(text):
            self._append_symbol(text[start:start + sizes[start]], ids)
            start += sizes[start]
        return ids

    def _merge(self, text: str) -> list[int]:
        """Size in characters of the symbol starting at each index after all merges (0 = absorbed)."""
        count = len(text)
        sizes, prev_of, next_of = [1] * count, list(range(-1, count - 1)), list(range(1, count + 1))
        next_of[-1] = -1
        queue: list[tuple[float, int, int, int]] = []
        for left in range(count - 1):
            self._push_pair(queue, text, sizes, left, left + 1)
        while queue:
            _, left, right, size = heapq.heappop(queue)
            if sizes[left] == 0 or sizes[right] == 0 or sizes[left] + sizes[right] != size:
                continue  # one side was merged elsewhere since this pair was queued
            sizes[left], sizes[right] = size, 0
            next_of[left] = next_of[right]
            if next_of[right] >= 0:
                prev_of[next_of[right]] = left
            self._push_pair(queue, text, sizes, prev_of[left], left)
            self._push_pair(queue, text, sizes, left, next_of[left])
        return sizes

    def _push_pair(self, queue: list, text: str, sizes: list[int], left: int, right: int) -> None:
        if left < 0 or right < 0:
            return
        size = sizes[left] + sizes[right]
        token_id = self.token_to_id.get(text[left:left + size])
        if token_id is not None:
            # highest score first, then the leftmost pair
            heapq.heappush(queue, (-self.scores[token_id], left, right, size))

    def _append_symbol(self, symbol: str, ids: list[int]) -> None:
        token_id = self.token_to_id.get(symbol)
        if token_id is not None:
            ids.append(token_id)
            return
        for byte in symbol.encode("utf-8"):
            byte_id = self._byte_ids[byte]
            if byte_id is None:
                raise TokenizerError(f"vocabulary has no byte token for 0x{byte:02X} (needed for {symbol!r})")
            ids.append(byte_id)
