"""Token ids identical to llama.cpp's llama_tokenize for every corpus string, and decode identical to
llama_detokenize (goldens written by scripts/make_tokenizer_golden.py)."""
import importlib.util
from pathlib import Path

import pytest

from pocketcli.tokenizer import Tokenizer

from tests.tokenizer.golden_files import SETTINGS, load_golden

QWEN_GOLDENS = {"qwen2": "qwen_qwen2", "llama-bpe": "qwen_llama_bpe", "gpt-2": "qwen_gpt_2", "default": "qwen_default"}


def mismatches(tokenizer: Tokenizer, corpus: list[str], expected: list[list[int]], setting: str) -> list[str]:
    add_special, parse_special = SETTINGS[setting]
    assert len(expected) == len(corpus)
    return [f"{text!r}: ours {tokenizer.encode(text, add_special, parse_special)} llama.cpp {ids}"
            for text, ids in zip(corpus, expected) if tokenizer.encode(text, add_special, parse_special) != ids]


def assert_all_match(tokenizer: Tokenizer, corpus: list[str], golden: dict) -> None:
    for setting, expected in golden["ids"].items():
        bad = mismatches(tokenizer, corpus, expected, setting)
        assert not bad, f"{setting}: {len(bad)}/{len(corpus)} differ, e.g.\n" + "\n".join(bad[:5])


def assert_decode_matches(tokenizer: Tokenizer, corpus: list[str], golden: dict) -> None:
    for kind, skip_special in (("special", False), ("plain", True)):
        bad = [text for text, want in zip(corpus, golden["decode"][kind])
               if tokenizer.decode(tokenizer.encode(text, add_special=False), skip_special=skip_special) != want]
        assert not bad, f"decode {kind}: {len(bad)} differ, e.g. {bad[:3]!r}"


def test_corpus_is_large_and_varied(corpus):
    assert len(corpus) >= 2000 and "" in corpus
    assert any("<start_of_turn>" in t for t in corpus) and any("<|im_start|>" in t for t in corpus)
    assert any("\u200d" in t for t in corpus)  # emoji ZWJ sequences
    assert any(len(t) > 5000 for t in corpus)


def test_committed_corpus_is_what_the_script_generates(corpus):
    script = Path(__file__).resolve().parents[2] / "scripts" / "make_tokenizer_golden.py"
    spec = importlib.util.spec_from_file_location("make_tokenizer_golden", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.make_corpus() == corpus


def test_gemma3_spm_ids_match_llama_cpp(gemma_tokenizer, corpus):
    assert_all_match(gemma_tokenizer, corpus, load_golden("gemma3"))


def test_gemma3_decode_matches_llama_cpp(gemma_tokenizer, corpus):
    assert_decode_matches(gemma_tokenizer, corpus, load_golden("gemma3"))


@pytest.mark.parametrize("pre", list(QWEN_GOLDENS))
def test_qwen_bpe_ids_match_llama_cpp(qwen_metadata_by_pre, corpus, pre):
    tokenizer = Tokenizer.from_gguf_metadata(qwen_metadata_by_pre(pre))
    assert_all_match(tokenizer, corpus, load_golden(QWEN_GOLDENS[pre]))


@pytest.mark.parametrize("pre", ["qwen2", "gpt-2"])
def test_qwen_decode_matches_llama_cpp(qwen_metadata_by_pre, corpus, pre):
    tokenizer = Tokenizer.from_gguf_metadata(qwen_metadata_by_pre(pre))
    assert_decode_matches(tokenizer, corpus, load_golden(QWEN_GOLDENS[pre]))


def test_pure_python_bpe_merging_matches_tokenizers(qwen_tokenizer, corpus):
    from pocketcli.tokenizer.bpe_model import PythonBpeMerger, parse_merge
    from pocketcli.tokenizer.byte_encoding import encode_bytes
    from pocketcli.tokenizer.pre_tokenizer import split_words

    vocab = qwen_tokenizer.vocab
    merger = PythonBpeMerger([p for p in map(parse_merge, vocab.merges) if p], vocab.token_to_id)
    words = {encode_bytes(w) for text in corpus[:600] for w in split_words(text, vocab.pre.regexes)}
    assert [w for w in words if merger.merge(w) != qwen_tokenizer.model._merge_word(w)] == []
