"""Load test for `pocket serve` with the official openai client.

Aggregate decode tok/s and TTFT p50/p99 at several concurrencies, and the TTFT ratio of a request whose long
prefix is already in the prefix cache. Unless --base-url is given, starts `pocket serve` on loopback in a child
process (as users run it: the client's threads then do not share the server's GIL) and also prints the server
process's CPU time per generated token.

    python bench/serve_load.py [--base-url http://127.0.0.1:8080/v1] [--concurrency 1 4 8 16] [--max-tokens 64]
                               [--threads N] [--rounds 3]

Each round runs every level in turn; a level's ratio is to the first level of the same round (seconds apart, so
the drift of a shared machine's speed between them is small), and with several rounds the median per level.
Where the server is `pocket serve`, each level also prints its engine steps as the server ran them (its /metrics:
mean wall time and batch): against `bench/profile_serve_step.py` (the same steps alone) they show what the HTTP
work and the clients beside the engine cost it.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
from collections import defaultdict
import time
import urllib.request
from pathlib import Path

SERVER_START_SECONDS = 300  # a cold numba cache compiles the kernels first


def start_local_server(ctx_size: int, max_num_seqs: int, threads: int) -> tuple[str, subprocess.Popen]:
    """`pocket serve` in a child process on a free loopback port, once /health answers 200: (base URL, process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-c", "import sys; from pocketcli.cli import main; sys.exit(main())", "serve",
               "--port", str(port), "--ctx-size", str(ctx_size), "--max-num-seqs", str(max_num_seqs)]
    if threads:
        command += ["--threads", str(threads)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + SERVER_START_SECONDS
    while not _is_healthy(port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError("pocket serve did not start")
        time.sleep(0.5)
    _wait_until_idle(server.pid)
    return f"http://127.0.0.1:{port}/v1", server


def _wait_until_idle(pid: int, idle_cpu_seconds: float = 0.05, timeout_seconds: float = 120) -> None:
    """Until the server's start-up work that runs after /health answers (llguidance's view of the vocabulary, in a
    background thread) has finished: it would otherwise take CPU from the first level measured."""
    deadline = time.monotonic() + timeout_seconds
    before = process_cpu_seconds(pid)
    while before is not None and time.monotonic() < deadline:
        time.sleep(1.0)
        after = process_cpu_seconds(pid)
        if after is None or after - before < idle_cpu_seconds:
            return
        before = after


def _is_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_stream(client, model, prompt, max_tokens, seed):
    """One streamed completion: TTFT, first/end times and the arrival time of every chunk that carries text
    (one token each; a token whose text the detokenizer holds back arrives with the next, so this undercounts)."""
    started = time.perf_counter()
    arrivals = []
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.7,
                                       seed=seed, stream=True, extra_body={"ignore_eos": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            arrivals.append(time.perf_counter())
    end = time.perf_counter()
    first = arrivals[0] if arrivals else end
    return {"ttft": first - started, "end": end, "first": first, "tokens": max_tokens, "arrivals": arrivals}


def run_level(client, model, concurrency, max_tokens):
    """Aggregate decode tok/s two ways:
    - steady: while all `concurrency` streams decode together, from the last stream's first token to the first
      stream's last token, the text chunks that arrived in that window (the batch the level names);
    - span: every stream's tokens after its first, over the first first-token to the last end (ramp-up, when the
      late requests are still being sent and prefilled, and ramp-down included)."""
    results = [None] * concurrency
    prompts = [f"Story number {i}: Once upon a time" for i in range(concurrency)]

    def work(i):
        results[i] = one_stream(client, model, prompts[i], max_tokens, i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    span_tokens = sum(r["tokens"] - 1 for r in results)
    span_seconds = max(r["end"] for r in results) - min(r["first"] for r in results)
    window_start = max(r["first"] for r in results)
    window_end = min(r["arrivals"][-1] if r["arrivals"] else r["end"] for r in results)
    window_tokens = sum(window_start < t <= window_end for r in results for t in r["arrivals"])
    steady = window_tokens / (window_end - window_start) if window_end > window_start and window_tokens else 0.0
    ttfts = sorted(r["ttft"] for r in results)
    return {"concurrency": concurrency, "agg_tok_s": steady, "span_tok_s": span_tokens / span_seconds,
            "window_seconds": max(0.0, window_end - window_start),
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
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prefix-tokens", type=int, default=2000, help="shared prefix length (0 = skip)")
    parser.add_argument("--threads", type=int, default=0, help="the local server's --threads (0: its default)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times through the concurrency levels: a shared VM's speed drifts within seconds, so "
                             "each round's ratios are to its own first level, and the medians are printed")
    args = parser.parse_args()
    import openai

    server = None
    if args.base_url is None:
        base_url, server = start_local_server(max(512, args.prefix_tokens + 256), max(args.concurrency),
                                              args.threads)
    else:
        base_url = args.base_url
    try:
        client = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600)
        model = args.model or client.models.list().data[0].id
        one_stream(client, model, "warm up", 2, 0)
        ratios: dict[int, list[float]] = defaultdict(list)
        rates: dict[int, list[float]] = defaultdict(list)
        for round_number in range(1, args.rounds + 1):
            base = span_base = None
            for level in args.concurrency:
                row = measure_level(client, model, level, args.max_tokens, server, base_url)
                base = base or row["agg_tok_s"]
                span_base = span_base or row["span_tok_s"]
                ratios[level].append(row["agg_tok_s"] / base)
                rates[level].append(row["agg_tok_s"])
                print(f"round {round_number} concurrency {level:3d}: {row['agg_tok_s']:7.2f} tok/s aggregate "
                      f"({row['agg_tok_s'] / base:4.2f}x; {row['window_seconds']:.1f} s with all streams decoding), "
                      f"span {row['span_tok_s']:7.2f} ({row['span_tok_s'] / span_base:4.2f}x), "
                      f"TTFT p50 {row['ttft_p50']:.2f} s, p99 {row['ttft_p99']:.2f} s{row['server_cpu']}, "
                      f"client CPU {row['client_ms']:.2f} ms/token{row['engine_steps']}", flush=True)
        if args.rounds > 1:
            for level in args.concurrency:
                print(f"median of {args.rounds} rounds, concurrency {level:3d}: "
                      f"{statistics.median(rates[level]):7.2f} tok/s, {statistics.median(ratios[level]):4.2f}x "
                      f"the round's first level (range {min(ratios[level]):.2f}-{max(ratios[level]):.2f}x)",
                      flush=True)
        if args.prefix_tokens:
            cold, warm = prefix_ratio(client, model, args.prefix_tokens)
            print(f"shared {args.prefix_tokens}-token prefix: TTFT cold {cold:.2f} s, cached {warm:.2f} s, "
                  f"ratio {cold / warm:.1f}x", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    return 0


def measure_level(client, model, level: int, max_tokens: int, server: subprocess.Popen | None,
                  base_url: str) -> dict:
    """run_level, plus the server's and this client's CPU time per generated token and the server's engine
    steps."""
    cpu_before = process_cpu_seconds(server.pid) if server else None
    client_before = process_cpu_seconds(os.getpid())
    steps_before = engine_steps(base_url)
    row = run_level(client, model, level, max_tokens)
    row["client_ms"] = 1e3 * (process_cpu_seconds(os.getpid()) - client_before) / (level * max_tokens)
    row["server_cpu"] = _server_cpu(server, cpu_before, level * max_tokens)
    row["engine_steps"] = _engine_steps_text(steps_before, engine_steps(base_url))
    return row


STEP_METRICS = ("pocket_engine_step_seconds_count", "pocket_engine_step_seconds_sum",
                "pocket_engine_step_sequences_total")


def engine_steps(base_url: str) -> tuple[float, float, float] | None:
    """(steps, their seconds, their sequences) so far from `pocket serve`'s /metrics; None from another server."""
    try:
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=10) as response:
            text = response.read().decode()
    except (OSError, ValueError):
        return None
    values = dict(re.findall(r"^(pocket_engine_step_\w+) (\S+)$", text, re.MULTILINE))
    if not all(name in values for name in STEP_METRICS):
        return None
    return tuple(float(values[name]) for name in STEP_METRICS)


def _engine_steps_text(before: tuple[float, float, float] | None, after: tuple[float, float, float] | None) -> str:
    """', engine step X ms at batch Y' over a level (prompts' steps included), or '' without the metrics."""
    if before is None or after is None or after[0] <= before[0]:
        return ""
    steps = after[0] - before[0]
    return (f", engine step {1e3 * (after[1] - before[1]) / steps:.1f} ms at batch "
            f"{(after[2] - before[2]) / steps:.1f}")


def _server_cpu(server: subprocess.Popen | None, cpu_before: float | None, num_tokens: int) -> str:
    """', server CPU X ms/token' over a level (prompts included), or '' without a local server."""
    cpu_after = process_cpu_seconds(server.pid) if server else None
    if cpu_before is None or cpu_after is None:
        return ""
    return f", server CPU {1e3 * (cpu_after - cpu_before) / num_tokens:.1f} ms/token"


if __name__ == "__main__":
    sys.exit(main())
