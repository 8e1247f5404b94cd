"""StreamingDetokenizer: same text as decode, emitted as soon as complete, never a broken character mid-stream."""
import pytest

from pocketcli.tokenizer import StreamingDetokenizer
from pocketcli.tokenizer.detokenizer import incomplete_tail_length

SAMPLES = ["😀👨‍👩‍👧‍👦 family 🏳️‍🌈", "日本語の文章です。𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀𓀁 🫠🫨 𪚥", "Ünïcödé ✓ — ok", "한국어 텍스트 🇯🇵🇺🇸",
           "<start_of_turn>model\nHi 👋<end_of_turn>", "<|im_start|>assistant\n你好<|im_end|>"]


def stream(tokenizer, ids):
    detokenizer = StreamingDetokenizer(tokenizer)
    chunks = [detokenizer.add_token(i) for i in ids]
    return chunks, detokenizer.flush()


@pytest.mark.parametrize("which", ["gemma_tokenizer", "qwen_tokenizer"])
@pytest.mark.parametrize("text", SAMPLES)
def test_stream_equals_decode_without_broken_characters(request, which, text):
    tokenizer = request.getfixturevalue(which)
    ids = tokenizer.encode(text, add_special=False)
    chunks, tail = stream(tokenizer, ids)
    assert "".join(chunks) + tail == tokenizer.decode(ids, skip_special=True)
    assert all("\ufffd" not in chunk for chunk in chunks) and tail == ""


def test_emoji_split_over_byte_tokens_is_held_back(gemma_tokenizer):
    ids = gemma_tokenizer.encode("🫨", add_special=False)  # newer than the vocab: four <0xXX> byte tokens
    assert len(ids) == 4 and all(gemma_tokenizer.vocab.tokens[i].startswith("<0x") for i in ids)
    chunks, tail = stream(gemma_tokenizer, ids)
    assert chunks == ["", "", "", "🫨"] and tail == ""


def test_cjk_split_over_byte_level_tokens(qwen_tokenizer):
    ids = qwen_tokenizer.encode("𓀀", add_special=False)  # rare character: several byte-level pieces
    assert len(ids) > 1
    chunks, _ = stream(qwen_tokenizer, ids)
    assert chunks[-1] == "𓀀" and set(chunks[:-1]) == {""}


def test_flush_releases_an_unfinished_character(gemma_tokenizer):
    first_byte = gemma_tokenizer.encode("𓀀", add_special=False)[0]
    detokenizer = StreamingDetokenizer(gemma_tokenizer)
    assert detokenizer.add_token(first_byte) == ""
    assert detokenizer.flush() == "\ufffd"


def test_control_tokens_render_empty_unless_asked(gemma_tokenizer):
    end_of_turn = gemma_tokenizer.encode("<end_of_turn>", add_special=False)[0]
    assert StreamingDetokenizer(gemma_tokenizer).add_token(end_of_turn) == ""
    assert StreamingDetokenizer(gemma_tokenizer, render_special=True).add_token(end_of_turn) == "<end_of_turn>"


@pytest.mark.parametrize("data, held", [(b"", 0), (b"a", 0), (b"\xc3", 1), (b"\xc3\xa9", 0), (b"\xe6\x97", 2),
                                        (b"\xf0\x9f\x98", 3), (b"\xf0\x9f\x98\x80", 0), (b"\x80\x80", 0)])
def test_incomplete_tail_length(data, held):
    assert incomplete_tail_length(data) == held
