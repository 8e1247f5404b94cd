"""One llama.cpp (llama-cpp-python) benchmark run, printed as the same JSON `pocket bench --json` prints.

Run by compare_llamacpp.py with the interpreter that has llama_cpp installed:
    python llamacpp_worker.py MODEL.gguf --n-prompt 512 --n-gen 128 --threads 2 --repetitions 1
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import numpy as np
from llama_cpp import Llama, llama_token_is_control


def random_prompt(llm: Llama, num_tokens: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, llm.n_vocab(), size=num_tokens * 2)
    ids = [int(t) for t in ids if not llama_token_is_control(llm._model.vocab, int(t))][:num_tokens - 1]
    return [llm.token_bos()] + ids


def time_pp(llm: Llama, prompt: list[int]) -> float:
    llm.reset()
    llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
    started = time.perf_counter()
    llm.eval(prompt)
    return time.perf_counter() - started


def time_tg(llm: Llama, num_tokens: int) -> float:
    llm.reset()
    llm.eval([llm.token_bos()])
    started = time.perf_counter()
    for _ in range(num_tokens):
        next_id = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        llm.eval([next_id])
    return time.perf_counter() - started


def summarize(test: str, num_tokens: int, seconds: list[float]) -> dict:
    rates = [num_tokens / s for s in seconds]
    return {"test": test, "num_tokens": num_tokens, "tokens_per_second_mean": round(statistics.fmean(rates), 2),
            "tokens_per_second_stdev": round(statistics.stdev(rates), 2) if len(rates) > 1 else 0.0,
            "seconds": [round(s, 4) for s in seconds]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--n-prompt", type=int, default=512)
    parser.add_argument("--n-gen", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=1)
    args = parser.parse_args()
    llm = Llama(model_path=args.model, n_ctx=args.n_prompt + args.n_gen + 16, n_batch=512,
                n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    results = []
    if args.n_prompt:
        prompt = random_prompt(llm, args.n_prompt)
        time_pp(llm, prompt)  # warm-up
        results.append(summarize(f"pp{args.n_prompt}", len(prompt),
                                 [time_pp(llm, prompt) for _ in range(args.repetitions)]))
    if args.n_gen:
        time_tg(llm, 8)  # warm-up
        results.append(summarize(f"tg{args.n_gen}", args.n_gen,
                                 [time_tg(llm, args.n_gen) for _ in range(args.repetitions)]))
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"model": args.model, "backend": "llama.cpp", "threads": args.threads, "results": results,
                      "peak_rss_mib": round(rss_mib, 1)}))


if __name__ == "__main__":
    main()
