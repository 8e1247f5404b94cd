"""llama-bench-style measurements on an engine: prompt processing (pp) and token generation (tg) speed."""
from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from ..sampling_params import SamplingParams
from .llm_engine import LLMEngine


@dataclass
class BenchResult:
    test: str  # "pp512", "tg128"
    num_tokens: int
    seconds: list[float] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> list[float]:
        return [self.num_tokens / s for s in self.seconds]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.tokens_per_second)

    @property
    def stdev(self) -> float:
        rates = self.tokens_per_second
        return statistics.stdev(rates) if len(rates) > 1 else 0.0

    def as_dict(self) -> dict:
        return {"test": self.test, "num_tokens": self.num_tokens, "tokens_per_second_mean": round(self.mean, 2),
                "tokens_per_second_stdev": round(self.stdev, 2), "seconds": [round(s, 4) for s in self.seconds]}


def random_prompt(engine: LLMEngine, num_tokens: int, seed: int = 0) -> list[int]:
    """Random non-special token ids after BOS, like llama-bench's pp test."""
    rng = np.random.default_rng(seed)
    vocab_size = engine.hparams.vocab_size
    ids = rng.integers(0, vocab_size, size=num_tokens * 2)
    ids = [int(t) for t in ids if not engine.tokenizer.is_special(int(t))][:num_tokens]
    bos = engine.tokenizer.bos_id
    return ([bos] + ids[:num_tokens - 1]) if bos is not None else ids


def time_prompt_processing(engine: LLMEngine, prompt_ids: list[int]) -> float:
    """Seconds to run the whole prompt through the model (all prefill chunks, one sampled token)."""
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    seq = engine.add_request(prompt_ids, params)
    started = time.perf_counter()
    while not seq.is_finished:
        engine.step()
    return time.perf_counter() - started


def time_token_generation(engine: LLMEngine, num_tokens: int) -> float:
    """Seconds to decode num_tokens tokens one at a time after a one-token prompt."""
    start_id = engine.tokenizer.bos_id if engine.tokenizer.bos_id is not None else 0
    params = SamplingParams(temperature=0.0, max_tokens=num_tokens + 1, ignore_eos=True)
    seq = engine.add_request([start_id], params)
    engine.step()  # the one-token prefill: not part of tg, as in llama-bench
    started = time.perf_counter()
    while not seq.is_finished:
        engine.step()
    return time.perf_counter() - started


def run_benchmark(engine: LLMEngine, num_prompt_tokens: int, num_gen_tokens: int, repetitions: int,
                  warmup: bool = True) -> list[BenchResult]:
    results = []
    if num_prompt_tokens:
        prompt = random_prompt(engine, num_prompt_tokens)
        if warmup:
            time_prompt_processing(engine, prompt)
        pp = BenchResult(f"pp{num_prompt_tokens}", len(prompt))
        pp.seconds = [time_prompt_processing(engine, prompt) for _ in range(repetitions)]
        results.append(pp)
    if num_gen_tokens:
        if warmup:
            time_token_generation(engine, min(num_gen_tokens, 8))
        tg = BenchResult(f"tg{num_gen_tokens}", num_gen_tokens)
        tg.seconds = [time_token_generation(engine, num_gen_tokens) for _ in range(repetitions)]
        results.append(tg)
    return results


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
