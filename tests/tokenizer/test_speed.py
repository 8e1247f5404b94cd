"""Speed budgets (generous, for a busy 2-core machine): build the 262k Gemma vocab from metadata in well under
a few seconds and encode a ~2,000-token prompt in well under a second on both vocabularies."""
import time

from pocketcli.tokenizer import Tokenizer


def prompt_of_about(tokenizer: Tokenizer, corpus: list[str], num_tokens: int) -> str:
    parts, count = [], 0
    for text in corpus[200:]:
        parts.append(text)
        count += len(tokenizer.encode(text, add_special=False))
        if count >= num_tokens:
            break
    return "\n".join(parts)


def best_seconds(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def test_gemma_vocab_builds_fast(gemma_metadata):
    assert best_seconds(lambda: Tokenizer.from_gguf_metadata(gemma_metadata), repeats=2) < 3.0


def test_encoding_2000_tokens_is_well_under_a_second(gemma_metadata, qwen_metadata_by_pre, corpus):
    for metadata in (gemma_metadata, qwen_metadata_by_pre("qwen2")):
        warm = Tokenizer.from_gguf_metadata(metadata)
        prompt = prompt_of_about(warm, corpus, 2000)
        cold = Tokenizer.from_gguf_metadata(metadata)  # no cached words
        started = time.perf_counter()
        assert len(cold.encode(prompt)) >= 2000
        assert time.perf_counter() - started < 1.0
