"""Chat templates: built-in fallbacks per architecture, the file's own Jinja template, and the sandbox."""
import pytest

from pocketcli.tokenizer import ChatTemplate, TokenizerError, make_chat_template
from tests.tokenizer.qwen_vocab import CHATML_TEMPLATE

GEMMA_META = {"tokenizer.ggml.tokens": ["<pad>", "<eos>", "<bos>"], "tokenizer.ggml.bos_token_id": 2,
              "tokenizer.ggml.eos_token_id": 1}
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Why?"}]


def test_gemma3_builtin_folds_system_into_first_user_turn():
    template = make_chat_template(GEMMA_META, "gemma3")
    assert template.name == "gemma"
    assert template.render(CONVERSATION) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n")
    assert template.render(CONVERSATION[1:2], add_generation_prompt=False) == (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n")


def test_gemma3_builtin_accepts_content_parts():
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}]
    assert "user\nHi there<end_of_turn>" in make_chat_template(GEMMA_META, "gemma3").render(messages)


def test_gemma3_builtin_rejects_non_alternating_roles():
    with pytest.raises(TokenizerError, match="alternate"):
        make_chat_template(GEMMA_META, "gemma3").render([{"role": "user", "content": "a"}] * 2)


def test_default_gemma_file_has_no_template_so_builtin_is_used(gemma_metadata):
    assert "tokenizer.chat_template" not in gemma_metadata
    prompt = make_chat_template(gemma_metadata, "gemma3").render([{"role": "user", "content": "Hi"}])
    assert prompt == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_chatml_from_file_with_system_message(qwen_metadata_by_pre, qwen_tokenizer):
    metadata = qwen_metadata_by_pre("qwen2")
    template = make_chat_template(metadata, "qwen2")
    assert template.name == "file" and template.source == CHATML_TEMPLATE
    prompt = template.render(CONVERSATION[:2])
    assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\n")
    ids = qwen_tokenizer.encode(prompt)
    assert ids[0] == qwen_tokenizer.vocab.token_to_id["<|im_start|>"] and ids.count(151645) == 2


def test_qwen_builtin_is_chatml_without_default_system():
    template = make_chat_template({}, "qwen3")
    prompt = template.render([{"role": "user", "content": "Hi"}])
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_llama_builtin_picks_llama3_or_llama2_by_vocab():
    llama3 = {"tokenizer.ggml.tokens": ["<|begin_of_text|>", "<|start_header_id|>"], "tokenizer.ggml.bos_token_id": 0}
    assert make_chat_template(llama3, "llama").render([{"role": "user", "content": "Hi"}]) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    llama2 = {"tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>"], "tokenizer.ggml.bos_token_id": 1,
              "tokenizer.ggml.eos_token_id": 2}
    assert make_chat_template(llama2, "llama").render(CONVERSATION) == (
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Why? [/INST]")


def test_unknown_architecture_without_template_is_a_clear_error():
    with pytest.raises(TokenizerError, match="'mamba'"):
        make_chat_template({}, "mamba")


def test_hf_helpers_tojson_and_strftime_now():
    template = ChatTemplate("{{ messages | tojson }}|{{ strftime_now('%Y') | length }}")
    assert template.render([{"role": "user", "content": "é"}]) == '[{"role": "user", "content": "é"}]|4'


def test_sandbox_blocks_internals():
    assert ChatTemplate("{{ ''.__class__ }}").render([]) == ""
    with pytest.raises(TokenizerError):
        ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([])
    with pytest.raises(TokenizerError):
        ChatTemplate("{% set x = [] %}{{ x.append(1) }}").render([])  # immutable sandbox


def test_bad_template_syntax_is_a_tokenizer_error():
    with pytest.raises(TokenizerError, match="does not parse"):
        ChatTemplate("{% for %}")
