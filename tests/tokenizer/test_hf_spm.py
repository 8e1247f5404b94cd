"""SPM-style tokenizer.json (Metaspace / "▁" words, <0xNN> byte fallback), as Llama-2 and Gemma HF repos ship it:
our HF tokenizer path encodes, decodes and streams exactly like `tokenizers` and transformers."""
import json
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from pocketcli.tokenizer.detokenizer import StreamingDetokenizer  # noqa: E402
from pocketcli.tokenizer.hf_tokenizer import HFTokenizer  # noqa: E402

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello tokens and tokenizers",
          "pocket llm runs models on the cpu", "def main():\n    return 42\n"] * 30
SPECIALS = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>"]
TEXTS = [
    "hello world", " hello world", "hello  world   ", "Hello, World! 42", "\n\tdef main():\n    return 42\n",
    "naïve café déjà vu", "日本語のテキスト", "emoji 🙂👍🏽 and zwj 👩‍💻", "ümlaut\u00a0nbsp", "x" * 40,
    "<start_of_turn>user\nhi<end_of_turn>", "</s> in the middle </s>", "", " ", "▁literal mark", "a\r\nb",
]
STYLES = {
    # Llama-2 (transformers' LlamaConverter, legacy=False): Metaspace pre-tokenizer, decoder strips the prefix space
    "llama2": dict(
        pre_tokenizer=lambda pt: pt.Metaspace(replacement="▁", prepend_scheme="first", split=False),
        normalizer=lambda n: None,
        decoder=lambda d: d.Sequence([d.Replace("▁", " "), d.ByteFallback(), d.Fuse(), d.Strip(" ", 1, 0)])),
    # Gemma: spaces become "▁" in the normalizer, no prefix space, decoder without Strip
    "gemma": dict(
        pre_tokenizer=lambda pt: pt.Split(" ", "merged_with_previous"),
        normalizer=lambda n: n.Replace(" ", "▁"),
        decoder=lambda d: d.Sequence([d.Replace("▁", " "), d.ByteFallback(), d.Fuse()])),
}


def write_spm_tokenizer(directory: Path, style: str) -> None:
    """Train a small BPE on "▁"-marked words, then give it the 256 <0xNN> byte tokens and byte_fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    parts = STYLES[style]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = parts["normalizer"](normalizers)
    tok.pre_tokenizer = parts["pre_tokenizer"](pre_tokenizers)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tok.to_str())
    learned = sorted((i, t) for t, i in spec["model"]["vocab"].items() if t not in SPECIALS)
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"<0x{b:02X}>": len(SPECIALS) + b for b in range(256)})
    vocab.update({t: len(vocab) + n for n, (_, t) in enumerate(x for x in learned if x[1] not in vocab)})
    spec["model"].update(vocab=vocab, byte_fallback=True, fuse_unk=True)
    spec["added_tokens"] = [dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False, normalized=False,
                                 special=True) for i, t in enumerate(SPECIALS)]
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = parts["decoder"](decoders)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module", params=list(STYLES))
def spm_dir(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    write_spm_tokenizer(directory, request.param)
    return directory


@pytest.fixture(scope="module")
def pair(spm_dir):
    return HFTokenizer(spm_dir), transformers.AutoTokenizer.from_pretrained(spm_dir)


def test_vocabulary_has_byte_fallback_tokens(pair):
    ours, theirs = pair
    tokens = theirs.convert_ids_to_tokens(theirs("日本", add_special_tokens=False)["input_ids"])
    assert sum(t.startswith("<0x") for t in tokens) == 6 and set(tokens) - {"▁"} <= {t for t in tokens if "<0x" in t}
    assert ours.vocab_size == len(theirs)


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_transformers(pair, text):
    ours, theirs = pair
    assert ours.encode(text) == theirs(text)["input_ids"]
    assert ours.encode(text, add_special=False) == theirs(text, add_special_tokens=False)["input_ids"]
    assert ours.encode(text, add_special=False, parse_special=False) == theirs(
        text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


@pytest.mark.parametrize("text", TEXTS)
def test_decode_and_streaming_match_transformers(pair, text):
    ours, theirs = pair
    ids = theirs(text)["input_ids"]
    assert ours.decode(ids) == theirs.decode(ids)
    assert ours.decode(ids, skip_special=True) == theirs.decode(ids, skip_special_tokens=True)
    reply = ids[1:]  # the engine streams the reply only (no BOS)
    if any(ours.is_special(i) for i in reply[:1]):
        return  # a reply that opens with a control token keeps its prefix space when streamed (the detokenizer
        # strips only the first piece's, and the control token's piece is empty); transformers strips it
    detok = StreamingDetokenizer(ours)
    streamed = "".join(detok.add_token(i) for i in reply) + detok.flush()
    assert streamed == theirs.decode(reply, skip_special_tokens=True)


def test_pieces_are_bytes_of_the_text(pair):
    ours, _ = pair
    ids = ours.encode("zwj 👩‍💻 naïve", add_special=False)
    pieces = [ours.token_to_piece(i) for i in ids]
    assert any(len(p) == 1 and p[0] >= 0x80 for p in pieces)  # byte-fallback pieces are single raw bytes
    assert b"".join(pieces).decode("utf-8").lstrip(" ") == "zwj 👩‍💻 naïve"
    assert ours.bos_id == 1 and ours.eos_id == 2 and ours.add_bos and ours.token_to_piece(1) == b""
