"""A GGUF string array left in place: its strings stay in the memory-mapped file and are decoded on access.

A 262k-entry tokenizer vocabulary as a list of Python strings costs ~24 MiB of heap (a ~60-byte object per
string, alive as long as the metadata is); left in place it costs one offsets array (2 MiB) and the ~4 MiB of
file pages it lies on.
"""
from __future__ import annotations

import array
import re
import struct
from collections.abc import Sequence

import numpy as np

LENGTH_BYTES = 8  # each string is a little-endian uint64 byte length, then its UTF-8 bytes
# strings decoded per call while iterating: about as fast as all at once, with ~2 MiB of them alive rather than
# ~40 MiB for Gemma 3's 262k vocabulary (the heap keeps what a transient that size took)
ITER_CHUNK = 16384


class StringArray(Sequence):
    """Read-only sequence of str over GGUF's [length][bytes][length][bytes]... layout."""

    def __init__(self, buf: memoryview, bounds: array.array):
        self._buf = buf  # the file's bytes (a view of the mapping)
        # bounds[i]: where string i's bytes start; bounds[i + 1] - LENGTH_BYTES: where they end (one more entry
        # than strings, so string i's end needs no stored length)
        self._bounds = bounds
        self._count = len(bounds) - 1

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("string array index out of range")
        start = self._bounds[index]
        return str(self._buf[start:self._bounds[index + 1] - LENGTH_BYTES], "utf-8", "replace")

    def __iter__(self):
        for start in range(0, self._count, ITER_CHUNK):
            stop = min(start + ITER_CHUNK, self._count)
            texts = self._texts_at_once(start, stop)
            yield from texts if texts is not None else self._texts_one_by_one(start, stop)

    def _texts_one_by_one(self, start: int, stop: int):
        # one copy of the chunk's bytes: slicing bytes beats slicing the map
        raw, first, bounds = self._raw(start, stop).tobytes(), self._bounds[start] - LENGTH_BYTES, self._bounds
        for index in range(start, stop):
            yield raw[bounds[index] - first:bounds[index + 1] - first - LENGTH_BYTES].decode("utf-8", "replace")

    def _texts_at_once(self, start: int, stop: int) -> list[str] | None:
        """Strings start..stop-1, decoded in one call: each length field becomes one NUL and the rest is dropped,
        the whole is decoded and split at the NULs. None where a string holds a NUL or invalid UTF-8: those go
        one by one, with "replace"."""
        raw = self._raw(start, stop)
        field_starts = self._bounds_in_raw(start, stop)[:-1] - LENGTH_BYTES
        is_text = np.ones(len(raw), dtype=bool)
        is_text[(field_starts[:, None] + np.arange(LENGTH_BYTES)).ravel()] = False
        if np.any(raw[is_text] == 0):
            return None
        is_text[field_starts] = True  # a field's first byte stays, as the NUL before its string
        kept = raw.copy()
        kept[field_starts] = 0
        try:
            text = kept[is_text].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            return None
        return text.split("\0")[1:]

    def indices_containing(self, part: str) -> list[int]:
        """Indices of the strings that hold `part`, found in the raw bytes (no string is decoded)."""
        needle = part.encode()
        if not needle:
            return list(range(self._count))
        raw = self._raw().tobytes()
        hits = np.array([match.start() for match in re.finditer(re.escape(needle), raw)], dtype=np.int64)
        bounds = self._bounds_in_raw()
        indices = np.searchsorted(bounds, hits, side="right") - 1
        inside = (indices >= 0) & (hits + len(needle) <= bounds[np.minimum(indices + 1, self._count)] - LENGTH_BYTES)
        return np.unique(indices[inside]).tolist()

    def empty_indices(self) -> list[int]:
        """Indices of the empty strings, found from the offsets alone (no string is decoded)."""
        gaps = np.diff(np.frombuffer(self._bounds, dtype=np.int64))
        return np.flatnonzero(gaps == LENGTH_BYTES).tolist()

    def __eq__(self, other) -> bool:
        if isinstance(other, StringArray) and self._count == other._count and np.array_equal(self._raw(),
                                                                                             other._raw()):
            return True  # else compare texts: unequal invalid bytes can decode to equal text
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._count and all(a == b for a, b in zip(self, other))

    __hash__ = None  # mutable-looking sequence semantics, like list

    def _bounds_in_raw(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The bounds of strings start..stop-1 as offsets into _raw(start, stop): where each string's bytes start
        (the last: past the end, + a field)."""
        stop = self._count if stop is None else stop
        bounds = np.frombuffer(self._bounds, dtype=np.int64)[start:stop + 1]
        return bounds - (bounds[0] - LENGTH_BYTES)

    def _raw(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The bytes of strings start..stop-1 (the whole array by default), lengths included (no copy)."""
        stop = self._count if stop is None else stop
        first = self._bounds[start] - LENGTH_BYTES
        return np.frombuffer(self._buf, dtype=np.uint8, count=self._bounds[stop] - LENGTH_BYTES - first, offset=first)

    def __reduce__(self):
        return list, (list(self),)  # a memory-mapped view does not pickle; its strings do

    def __repr__(self) -> str:
        return f"StringArray({self._count} strings)"


def read_string_array(buf: memoryview, pos: int, count: int) -> tuple[StringArray, int]:
    """The `count` strings starting at byte `pos` of `buf`, and the position after them.
    Raises EOFError when the array runs past the end of `buf`."""
    if pos + LENGTH_BYTES * count > len(buf):  # before allocating: a corrupt count can be huge
        raise EOFError
    bounds = array.array("q", [0]) * (count + 1)
    unpack_length = struct.Struct("<Q").unpack_from
    try:
        for index in range(count):  # the hot loop of opening a file: one unpack and two adds per string
            pos += LENGTH_BYTES
            bounds[index] = pos
            pos += unpack_length(buf, pos - LENGTH_BYTES)[0]
    except struct.error:  # a length field runs past the end
        raise EOFError from None
    if pos > len(buf):
        raise EOFError
    bounds[count] = pos + LENGTH_BYTES
    return StringArray(buf, bounds), pos
