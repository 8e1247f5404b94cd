"""decode(encode(s)) gives s back wherever llama.cpp's pipeline is lossless.

Lossless: byte-level BPE with clean_spaces off (qwen2), and Gemma's SPM for all text without a literal U+2581
(SPM writes spaces as ▁, so a ▁ in the input comes back as a space). Lossy by design: BPE vocabs whose
pre-tokenizer turns on clean_spaces (gpt-2, default, llama-bpe) drop the space before . , ? ! 's 'm 're 've.
"""
from pocketcli.tokenizer.spm_model import SPACE_MARK
from pocketcli.tokenizer.tokenizer import clean_up_spaces


def roundtrip_failures(tokenizer, corpus, parse_special=True):
    return [s for s in corpus
            if tokenizer.decode(tokenizer.encode(s, add_special=False, parse_special=parse_special)) != s]


def test_qwen2_bpe_roundtrip_is_exact(qwen_tokenizer, corpus):
    assert roundtrip_failures(qwen_tokenizer, corpus) == []
    assert roundtrip_failures(qwen_tokenizer, corpus, parse_special=False) == []


def test_gemma_spm_roundtrip_is_exact_except_literal_space_marks(gemma_tokenizer, corpus):
    lossless = [s for s in corpus if SPACE_MARK not in s]
    assert len(lossless) > 2000
    assert roundtrip_failures(gemma_tokenizer, lossless) == []
    assert roundtrip_failures(gemma_tokenizer, lossless, parse_special=False) == []
    for s in set(corpus) - set(lossless):
        assert gemma_tokenizer.decode(gemma_tokenizer.encode(s, add_special=False)) == s.replace(SPACE_MARK, " ")


def test_gpt2_pre_roundtrip_loses_only_cleaned_spaces(qwen_metadata_by_pre, corpus):
    from pocketcli.tokenizer import Tokenizer
    tokenizer = Tokenizer.from_gguf_metadata(qwen_metadata_by_pre("gpt-2"))
    for s in roundtrip_failures(tokenizer, corpus):
        assert tokenizer.decode(tokenizer.encode(s, add_special=False)) == clean_up_spaces(s.encode()).decode()


def test_skip_special_drops_control_tokens(gemma_tokenizer):
    ids = gemma_tokenizer.encode("<start_of_turn>user\nHi<end_of_turn>\n")
    assert gemma_tokenizer.decode(ids, skip_special=True) == "user\nHi\n"
    assert gemma_tokenizer.decode(ids) == "<bos><start_of_turn>user\nHi<end_of_turn>\n"
