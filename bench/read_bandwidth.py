"""The machine's streaming read bandwidth: sums of a large float32 array (far past the caches), on 1 thread and on
N threads (each summing its own slice; numpy releases the GIL inside the reduction), best of a few runs.

    python bench/read_bandwidth.py [--gib 1.5] [--threads 2] [-r 5] [--json]

Decode reads every weight once a token, so (weight bytes per token x tok/s) / this bandwidth is the fraction of
the memory system a decode step uses (bench/synthetic_model.py prints the weight bytes per token of its models).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def read_gbps(array: np.ndarray, num_threads: int, rounds: int) -> float:
    """Best GB/s (10^9 bytes) of summing `array` in `num_threads` slices at once."""
    slices = np.array_split(array, num_threads)
    best = float("inf")
    with ThreadPoolExecutor(num_threads) as pool:
        for _ in range(rounds):
            start = time.perf_counter()
            list(pool.map(np.sum, slices))
            best = min(best, time.perf_counter() - start)
    return array.nbytes / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.5, help="array size in GiB (default 1.5)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    array = np.ones(int(args.gib * 2**30) // 4, np.float32)  # written once: every page is resident
    report = {"bytes": array.nbytes, "one_thread_gbps": round(read_gbps(array, 1, args.rounds), 2),
              "threads": args.threads, "threads_gbps": round(read_gbps(array, args.threads, args.rounds), 2)}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"read {array.nbytes / 2**30:.2f} GiB: {report['one_thread_gbps']} GB/s on 1 thread, "
              f"{report['threads_gbps']} GB/s on {args.threads}")


if __name__ == "__main__":
    main()
