"""N-gram (prompt lookup) speculation on an input-grounded task with the default model: decode tok/s with and
without speculation, checking the output is identical (greedy).

    python bench/spec_ngram.py [-m MODEL] [-n 128] [--spec-k 8] [-r 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pocketcli.config import EngineConfig
from pocketcli.engine.generation import stream_generate
from pocketcli.chat.session import encode_messages
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams

TEXT = ("The old lighthouse stood at the edge of the cliff for more than two hundred years. Every night its keeper "
        "climbed the one hundred and twelve steps to light the lamp, and every morning he wrote the weather, the "
        "ships he had seen and the state of the sea in a small leather book. When the keeper retired, the town "
        "council decided to replace the lamp with an automatic light, but the people of the village asked that "
        "the leather books be kept in the library, where children still read them on rainy afternoons.")
TASK = "Repeat the following text exactly, but replace every 'keeper' with 'guardian':\n\n" + TEXT


def run_once(engine: LLMEngine, prompt_ids: list[int], max_tokens: int) -> tuple[list[int], float]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    tokens, first_at = [], None
    for chunk in stream_generate(engine, prompt_ids, params):
        if first_at is None:
            first_at = time.perf_counter()
        tokens.extend(chunk.token_ids)
    decode_seconds = time.perf_counter() - first_at
    return tokens, (len(tokens) - 1) / decode_seconds


def measure(model: str, spec: str | None, spec_k: int, max_tokens: int, repetitions: int) -> dict:
    engine = LLMEngine(EngineConfig(model, ctx_size=1024, enable_prefix_caching=False, spec=spec, spec_k=spec_k))
    prompt_ids = encode_messages(engine, [{"role": "user", "content": TASK}])
    run_once(engine, prompt_ids, 4)  # warm-up: kernels compiled, caches touched
    runs = [run_once(engine, prompt_ids, max_tokens) for _ in range(repetitions)]
    result = {"spec": spec or "off", "tokens": runs[0][0], "decode_tok_s": statistics.median(r[1] for r in runs),
              "text": engine.tokenizer.decode(runs[0][0])}
    if engine.speculative is not None:
        result["stats"] = engine.speculative.stats.as_dict()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("--spec-k", type=int, default=8)
    parser.add_argument("-r", "--repetitions", type=int, default=2)
    parser.add_argument("-t", "--threads", type=int, default=0, help="numba threads (default: all cores)")
    args = parser.parse_args()
    if args.threads:
        import numba

        numba.set_num_threads(args.threads)
    model = resolve_model(args.model)
    base = measure(model, None, args.spec_k, args.max_tokens, args.repetitions)
    spec = measure(model, "ngram", args.spec_k, args.max_tokens, args.repetitions)
    print(json.dumps({"model": model, "completion_tokens": len(base["tokens"]),
                      "identical_output": base["tokens"] == spec["tokens"],
                      "decode_tok_s_off": round(base["decode_tok_s"], 2),
                      "decode_tok_s_ngram": round(spec["decode_tok_s"], 2),
                      "speedup": round(spec["decode_tok_s"] / base["decode_tok_s"], 2),
                      "spec_k": args.spec_k, "spec_stats": spec.get("stats"),
                      "text_head": base["text"][:160]}, indent=1))


if __name__ == "__main__":
    main()
