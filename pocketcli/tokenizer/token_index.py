"""Token text -> id, as flat arrays instead of a dict.

A dict over Gemma 3's 262k tokens holds a str key and an int value per token: ~35 MiB of heap. This index holds
an open-addressing table of ids probed linearly from hash(text), and 32 bits of each token's hash (~3 MiB in
all); a hit is checked against the token's text, so two texts with one hash never alias. Equal texts: the last
id wins, as in llama.cpp (and in dict(zip(texts, ids))).
"""
from __future__ import annotations

import array
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

EMPTY_SLOT = -1


class TokenIndex(Mapping):
    def __init__(self, texts: Sequence[str]):
        self._texts = texts
        hashes = np.fromiter(map(hash, texts), dtype=np.int64, count=len(texts))
        tags = hashes >> 32  # the high 32 bits (the home slot takes the low ones): checked before the text
        self._tags = array.array("i", tags.astype(np.int32).tobytes())
        self._mask = table_size(len(texts)) - 1
        home_slots = hashes & self._mask
        # one sort, by home slot then tag: what place_sorted_ids needs, with equal hashes side by side
        sort_keys = (home_slots << 32) | (tags & 0xFFFFFFFF)
        order = np.argsort(sort_keys)
        order = drop_repeated_texts(order, sort_keys[order], hashes, texts)
        self._num_ids = len(order)
        table = place_sorted_ids(home_slots[order], order, self._mask + 1)
        self._slots = array.array("i", table.tobytes())  # an array.array item reads faster than a numpy one

    def get(self, text: str, default=None):
        """The id of `text`, else `default`: the tokenizers' hot lookup."""
        h = hash(text)
        slots, tags, texts = self._slots, self._tags, self._texts
        slot, tag = h & self._mask, h >> 32
        while True:
            token_id = slots[slot]
            if token_id == EMPTY_SLOT:
                return default
            if tags[token_id] == tag and texts[token_id] == text:
                return token_id
            slot += 1

    def __getitem__(self, text: str) -> int:
        token_id = self.get(text)
        if token_id is None:
            raise KeyError(text)
        return token_id

    def __contains__(self, text) -> bool:
        return isinstance(text, str) and self.get(text) is not None

    def __len__(self) -> int:
        return self._num_ids

    def _ids(self) -> np.ndarray:
        slots = np.frombuffer(self._slots, dtype=np.int32)
        return np.sort(slots[slots != EMPTY_SLOT])

    def __iter__(self) -> Iterator[str]:
        texts = self._texts
        return (texts[i] for i in self._ids().tolist())

    def items(self):
        texts = self._texts
        return [(texts[i], i) for i in self._ids().tolist()]

    def __reduce__(self):
        return TokenIndex, (list(self._texts),)  # hash(str) differs between processes: rebuild


def table_size(num_ids: int) -> int:
    """A power of two at least twice the ids: linear probes stay short (~1.5 per hit, ~2.5 per miss)."""
    return 1 << max(3, (2 * num_ids - 1).bit_length())


def drop_repeated_texts(order: np.ndarray, sorted_keys: np.ndarray, hashes: np.ndarray,
                        texts: Sequence[str]) -> np.ndarray:
    """`order` (ids sorted by a key that equal hashes share) without the ids whose text a later id repeats; texts
    are compared only where the hashes are equal."""
    starts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    if len(starts) == max(0, len(order) - 1):
        return order  # every key differs, so every hash does: the common case
    bounds = np.concatenate(([0], starts, [len(order)]))
    shared = np.diff(bounds) > 1  # keys held by more than one id (CPython's str hash alone gives 1077 pairs in
    # Gemma 3's vocabulary: it hashes the raw code units, so "er" and "牥" (U+7265) collide)
    repeated = []  # positions in `order`
    for start, stop in zip(bounds[:-1][shared].tolist(), bounds[1:][shared].tolist()):
        group = sorted(order[start:stop].tolist())
        order[start:stop] = group
        for offset, token_id in enumerate(group):
            later_ids = group[offset + 1:]
            if any(hashes[token_id] == hashes[i] and texts[token_id] == texts[i] for i in later_ids):
                repeated.append(start + offset)
    return np.delete(order, repeated)


def place_sorted_ids(home_slots: np.ndarray, ids: np.ndarray, num_home_slots: int) -> np.ndarray:
    """Linear-probing table of `ids` (sorted by `home_slots`), each at its home slot or the first free one after
    it, with no wrap-around (the table grows past the last home slot instead). In home-slot order, an id lands at
    max(home, previous id's slot + 1): a lookup from its home slot meets only occupied slots before it."""
    rank = np.arange(len(ids))
    final_slots = home_slots - rank
    np.maximum.accumulate(final_slots, out=final_slots)
    final_slots += rank
    last_used = int(final_slots[-1]) if len(ids) else -1
    table = np.full(max(num_home_slots, last_used + 2), EMPTY_SLOT, dtype=np.int32)  # last slot empty: probes end
    table[final_slots] = ids
    return table
