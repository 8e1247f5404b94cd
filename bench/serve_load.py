"""Load test for `pocket serve` with the official openai client.

Aggregate decode tok/s and TTFT p50/p99 at several concurrencies, and the TTFT ratio of a request whose long
prefix is already in the prefix cache. Starts an in-process server on loopback unless --base-url is given.

    python bench/serve_load.py [--base-url http://127.0.0.1:8080/v1] [--concurrency 1 4 8 16] [--max-tokens 32]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def start_local_server(ctx_size: int, max_num_seqs: int):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "server"))
    from conftest import LiveServer, free_port

    from pocketcli.config import EngineConfig
    from pocketcli.engine.engine_loop import EngineLoop
    from pocketcli.engine.llm_engine import LLMEngine
    from pocketcli.registry import load_registry, resolve_model
    from pocketcli.server import make_app

    loop = EngineLoop(LLMEngine(EngineConfig(resolve_model(None), ctx_size=ctx_size,
                                             max_num_seqs=max_num_seqs))).start()
    name = load_registry().default
    server = LiveServer(make_app(loop, name), free_port()).start()
    return server.base_url + "/v1", name, server


def one_stream(client, model, prompt, max_tokens, seed):
    started = time.perf_counter()
    first, count = None, 0
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.7,
                                       seed=seed, stream=True, extra_body={"ignore_eos": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text and first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return {"ttft": (first or end) - started, "end": end, "first": first or end, "tokens": max_tokens}


def run_level(client, model, concurrency, max_tokens):
    results = [None] * concurrency
    prompts = [f"Story number {i}: Once upon a time" for i in range(concurrency)]

    def work(i):
        results[i] = one_stream(client, model, prompts[i], max_tokens, i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # decode window: from the last first-token to the first end, all streams decode together
    decode_tokens = sum(r["tokens"] - 1 for r in results)
    decode_seconds = max(r["end"] for r in results) - min(r["first"] for r in results)
    ttfts = sorted(r["ttft"] for r in results)
    return {"concurrency": concurrency, "agg_tok_s": decode_tokens / decode_seconds,
            "ttft_p50": statistics.median(ttfts), "ttft_p99": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]}


def prefix_ratio(client, model, prefix_tokens):
    prefix = "The history of the region is long and varied. " * (prefix_tokens // 10)  # ~10 tokens each
    cold = one_stream(client, model, prefix + " Question A:", 2, 0)["ttft"]
    warm = one_stream(client, model, prefix + " Question B:", 2, 0)["ttft"]
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prefix-tokens", type=int, default=2000, help="shared prefix length (0 = skip)")
    args = parser.parse_args()
    import openai

    server = None
    if args.base_url is None:
        base_url, model, server = start_local_server(max(512, args.prefix_tokens + 256), max(args.concurrency))
    else:
        base_url, model = args.base_url, args.model
    client = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600)
    model = model or client.models.list().data[0].id
    one_stream(client, model, "warm up", 2, 0)
    base = None
    for level in args.concurrency:
        row = run_level(client, model, level, args.max_tokens)
        base = base or row["agg_tok_s"]
        print(f"concurrency {level:3d}: {row['agg_tok_s']:7.2f} tok/s aggregate ({row['agg_tok_s'] / base:4.1f}x), "
              f"TTFT p50 {row['ttft_p50']:.2f} s, p99 {row['ttft_p99']:.2f} s", flush=True)
    if args.prefix_tokens:
        cold, warm = prefix_ratio(client, model, args.prefix_tokens)
        print(f"shared {args.prefix_tokens}-token prefix: TTFT cold {cold:.2f} s, cached {warm:.2f} s, "
              f"ratio {cold / warm:.1f}x", flush=True)
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
