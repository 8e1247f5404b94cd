"""GGUF string arrays stay in the mapping: same strings as gguf-py reads, decoded on access."""
import pickle

import pytest
from gguf import GGUFWriter

from gguf_loader import ModelFileError, open_gguf
from gguf_loader.string_array import StringArray, read_string_array
from tests.models.tiny_gguf import finish_gguf

TEXTS = ["<s>", "", "a", "ü", "日本", "", "▁hello"]


def length_prefixed(*raw: bytes) -> bytes:
    return b"".join(len(r).to_bytes(8, "little") + r for r in raw)


@pytest.fixture
def strings_gguf(tmp_path):
    path = tmp_path / "strings.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", TEXTS)
    writer.add_array("test.no_strings", [""])
    finish_gguf(writer)
    return path


def test_reads_like_a_list(strings_gguf):
    tokens = open_gguf(strings_gguf).metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, StringArray) and len(tokens) == len(TEXTS)
    assert list(tokens) == TEXTS and tokens == TEXTS and tokens != TEXTS[:-1] and tokens != ["x"] * len(TEXTS)
    assert [tokens[i] for i in range(-len(TEXTS), len(TEXTS))] == TEXTS + TEXTS
    assert tokens[1:5] == TEXTS[1:5] and tokens[::-2] == TEXTS[::-2]
    assert "日本" in tokens and "日" not in tokens
    assert tokens.empty_indices() == [1, 5]
    with pytest.raises(IndexError):
        tokens[len(TEXTS)]


def test_equal_arrays_of_two_files_compare_equal(strings_gguf, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(strings_gguf.read_bytes())
    key = "tokenizer.ggml.tokens"
    assert open_gguf(strings_gguf).metadata[key] == open_gguf(copy).metadata[key]


def test_pickles_as_its_strings(strings_gguf):
    tokens = open_gguf(strings_gguf).metadata["tokenizer.ggml.tokens"]
    assert pickle.loads(pickle.dumps(tokens)) == TEXTS


def test_invalid_utf8_decodes_with_replacement():
    buf = memoryview(length_prefixed(b"ok", b"\xff\xfe", b"") + b"tail")
    strings, end = read_string_array(buf, 0, 3)
    assert list(strings) == ["ok", "\ufffd\ufffd", ""] and strings.empty_indices() == [2]
    assert bytes(buf[end:]) == b"tail"
    other, _ = read_string_array(memoryview(length_prefixed(b"ok", b"\xfe\xff", b"")), 0, 3)
    assert strings == other  # unequal bytes, equal texts


@pytest.mark.parametrize("raw, count", [
    (length_prefixed(b"abc")[:-1], 1),  # the last string's bytes are cut
    (length_prefixed(b"abc") + b"\x01\x00", 2),  # the second length is cut
    (length_prefixed(b"abc"), 2 ** 60),  # a corrupt count: no huge allocation, a clear error
])
def test_truncated_arrays_raise(raw, count):
    with pytest.raises(EOFError):
        read_string_array(memoryview(raw), 0, count)


def test_truncated_file_names_the_string_array(strings_gguf, tmp_path):
    data = strings_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:data.index("▁hello".encode()) + 2])
    with pytest.raises(ModelFileError, match="string array runs past the end"):
        open_gguf(cut)


@pytest.mark.parametrize("raw_strings", [
    [b"ok", b"", "日本".encode(), b"x" * 300],  # decoded at once (a 300-byte string: its length has a 0x2c byte)
    [b"ok", b"a\x00b", b""],  # a NUL inside a string: one by one
    [b"ok", b"\xff", b"z"],  # invalid UTF-8: one by one, with replacement
])
def test_iterating_decodes_like_one_by_one(raw_strings):
    strings, _ = read_string_array(memoryview(length_prefixed(*raw_strings)), 0, len(raw_strings))
    assert list(strings) == [raw.decode("utf-8", "replace") for raw in raw_strings]


def test_iterating_in_chunks_decodes_each_chunk_its_own_way(monkeypatch):
    """A chunk with invalid UTF-8 or a NUL goes one by one; the chunks around it still decode at once."""
    monkeypatch.setattr("gguf_loader.string_array.ITER_CHUNK", 2)
    raw_strings = [b"ok", b"", b"\xff", b"z", "日本".encode(), b"a\x00b", b"x" * 300]
    strings, _ = read_string_array(memoryview(b"prefix" + length_prefixed(*raw_strings)), 6, len(raw_strings))
    assert list(strings) == [raw.decode("utf-8", "replace") for raw in raw_strings]


def test_indices_containing_finds_parts_within_strings():
    raw_strings = [b"<unused0>", b"un", b"used", b"unused", b"", b"x<unused12>", "ünused".encode()]
    strings, _ = read_string_array(memoryview(b"prefix" + length_prefixed(*raw_strings)), 6, len(raw_strings))
    assert strings.indices_containing("unused") == [0, 3, 5]  # "un" + "used" across a bound is not a hit
    assert strings.indices_containing("ü") == [6] and strings.indices_containing("zz") == []
