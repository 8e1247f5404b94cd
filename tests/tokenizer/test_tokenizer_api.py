"""Tokenizer API: special ids, stop tokens, token_to_piece rules, errors, and SPM/BPE details on tiny vocabs."""
import pytest

from pocketcli.tokenizer import Tokenizer, TokenizerError

NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6


def tiny_spm(**flags) -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab", "<0x41>", "<0xC3>", "<0xA9>", "<sep>", "[x]"]
    types = [2, CONTROL, CONTROL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, BYTE, BYTE, BYTE, CONTROL,
             USER_DEFINED]
    scores = [0, 0, 0, -1, -2, -2, -1.5, -1.2, -0.5, 0, 0, 0, 0, 0]
    metadata = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
                "tokenizer.ggml.token_type": types}
    metadata.update({f"tokenizer.ggml.{key}": value for key, value in flags.items()})
    return Tokenizer.from_gguf_metadata(metadata)


def test_spm_space_prefix_bos_and_byte_fallback():
    tokenizer = tiny_spm()  # SPM defaults: add_bos, add_space_prefix, bos=1, eos=2
    assert tokenizer.add_bos and tokenizer.bos_id == 1 and tokenizer.eos_id == 2
    assert tokenizer.encode("ab") == [1, 8]
    assert tokenizer.encode("ab", add_special=False) == [8]
    assert tokenizer.encode("Aé", add_special=False) == [3, 9, 10, 11]  # ▁, then bytes of A and é
    assert tokenizer.decode([8]) == "ab"  # the prefix space is dropped again
    assert tokenizer.decode(tokenizer.encode("ab ab", add_special=False)) == "ab ab"


def test_spm_space_prefix_after_special_tokens_and_flags_from_file():
    tokenizer = tiny_spm()
    assert tokenizer.encode("ab<sep>ab", add_special=False) == [8, 12, 8]
    with pytest.raises(TokenizerError, match="no byte token"):  # '<sep>' stays text; '<' has no byte token here
        tokenizer.encode("ab<sep>ab", add_special=False, parse_special=False)
    assert tokenizer.encode("ab[x]ab", add_special=False, parse_special=False) == [8, 13, 8]  # user-defined: always
    plain = tiny_spm(add_space_prefix=False, add_bos_token=False, add_eos_token=True)
    assert plain.encode("ab") == [7, 2]


def test_token_to_piece_rules(gemma_tokenizer):
    vocab = gemma_tokenizer.vocab
    assert gemma_tokenizer.token_to_piece(vocab.token_to_id["<0x41>"]) == b"A"
    assert gemma_tokenizer.token_to_piece(vocab.token_to_id["▁hello"]) == b" hello"
    turn = vocab.token_to_id["<start_of_turn>"]
    assert gemma_tokenizer.token_to_piece(turn) == b""
    assert gemma_tokenizer.token_to_piece(turn, special=True) == b"<start_of_turn>"
    assert gemma_tokenizer.token_to_piece(vocab.token_to_id["<table>"]) == b"<table>"  # user-defined: always shown
    assert gemma_tokenizer.is_special(turn) and not gemma_tokenizer.is_special(vocab.token_to_id["▁hello"])


def test_gemma_special_ids(gemma_tokenizer):
    assert (gemma_tokenizer.vocab_size, gemma_tokenizer.bos_id, gemma_tokenizer.eos_id) == (262144, 2, 1)
    assert gemma_tokenizer.add_bos and not gemma_tokenizer.vocab.add_space_prefix
    end_of_turn = gemma_tokenizer.vocab.token_to_id["<end_of_turn>"]
    # llama.cpp also counts </s> (a user-defined HTML tag in Gemma 3) as end-of-generation
    assert {1, end_of_turn} <= set(gemma_tokenizer.stop_token_ids)
    assert gemma_tokenizer.encode("<start_of_turn>user\nHi") == [2, 105, 2364, 107, 10979]


def test_qwen_special_ids_and_pieces(qwen_tokenizer):
    vocab = qwen_tokenizer.vocab
    assert qwen_tokenizer.vocab_size == 151936 and not qwen_tokenizer.add_bos
    # <|endoftext|>, <|im_end|>, and (llama.cpp's text rule) the ordinary token "</s>"
    assert qwen_tokenizer.stop_token_ids == [vocab.token_to_id["</s>"], 151643, 151645]
    assert qwen_tokenizer.encode("<|im_start|>user") == [151644, 872]
    assert qwen_tokenizer.token_to_piece(vocab.token_to_id["Ġhello"]) == b" hello"
    assert qwen_tokenizer.token_to_piece(151645) == b""
    assert qwen_tokenizer.token_to_piece(151645, special=True) == b"<|im_end|>"
    assert qwen_tokenizer.encode("") == [] and qwen_tokenizer.decode([]) == ""


def test_unknown_tokenizer_model_and_pre_are_named():
    with pytest.raises(TokenizerError, match="'bert'"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "mystery-pre",
                "tokenizer.ggml.tokens": ["a", "b", "ab"], "tokenizer.ggml.merges": ["a b"]}
    with pytest.raises(TokenizerError, match="'mystery-pre'"):
        Tokenizer.from_gguf_metadata(metadata)
    assert issubclass(TokenizerError, ValueError)


def test_tiny_bpe_merges_by_rank():
    tokens = ["a", "b", "c", "ab", "bc", "abc", "Ġ", "Ġa"]
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.merges": ["b c", "a bc", "a b", "Ġ a"]}
    tokenizer = Tokenizer.from_gguf_metadata(metadata)
    assert tokenizer.encode("abc") == [5]  # b+c first (rank 0), then a+bc
    assert tokenizer.encode("ab a") == [3, 7]
    assert tokenizer.decode([3, 7]) == "ab a"
