"""Every linear path that can serve a model's weights, timed side by side in one process at one CPU tier.

    python bench/matvec_paths.py [-m MODEL] [--tier avx2] [--tokens 1,5,16] [--threads 1] [-r 7] [--json]

For each distinct (quant type, shape) of the model's 2-D weights and each token count: the median time of
`dispatch.linear_rows_into` forced onto each path that serves it (fused, batch, int8, run, tiled; amx where the
CPU has it), and the weights' bytes read per second. Repetitions alternate the paths, so load drifting on a
shared machine hits all alike; with --threads 1 the times are the calling thread's CPU seconds (time.thread_time),
which another process stealing the core inflates far less than wall time. The path dispatch picks is starred.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None, help="GGUF path or registry name (default: the default)")
    parser.add_argument("--tier", default=None, help="POCKET_CPU_TIER to compile for (default: this CPU's)")
    parser.add_argument("--tokens", default="1,5,16", help="token counts, comma separated")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("-r", "--repetitions", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def distinct_weights(model_path: str):
    from gguf_loader.reader import GGUFFile
    from kernels_numba.cpu.matvec import quant_type as qt
    gguf_file, seen = GGUFFile(model_path), {}
    for w in map(gguf_file.tensor, gguf_file.tensor_infos):
        if len(w.shape) == 2 and w.ggml_type in qt.TYPE_CODES and w.type_name != "F32":
            seen.setdefault((w.type_name, tuple(w.shape)), w)
    return list(seen.values())


def operands_by_path(w):
    """{path name: (code, data)} for each path that can run w (the run paths on its run layout copy)."""
    from kernels_numba.cpu.dequant import readonly_bytes
    from kernels_numba.cpu.matvec import dispatch, run_layout
    from kernels_numba.cpu.matvec import quant_type as qt
    code, data = qt.type_code_of(w), readonly_bytes(w)
    runs = run_layout.run_weights(w) if dispatch.USE_INT8_DOT else None
    operands = {}
    for path, name in enumerate(dispatch.PATH_NAMES):
        if path == dispatch.RUN and runs is not None:
            operands[name] = (runs.code, runs.data)
        elif path not in (dispatch.RUN, dispatch.F32_BLAS) and dispatch.serves(path, code):
            if path in (dispatch.INT8, dispatch.AMX) and not dispatch.USE_INT8_DOT:
                continue
            operands[name] = (code, data)
    return operands


def timed(function, use_thread_time: bool) -> float:
    clock = time.thread_time if use_thread_time else time.perf_counter
    start = clock()
    function()
    return clock() - start


def measure(w, num_tokens: int, repetitions: int, use_thread_time: bool) -> dict:
    import numpy as np
    from kernels_numba.cpu.matvec import dispatch
    operands = operands_by_path(w)
    x = np.random.default_rng(0).standard_normal((num_tokens, w.shape[-1])).astype(np.float32)
    out = np.empty((num_tokens, w.shape[0]), np.float32)
    chosen = dispatch.PATH_NAMES[dispatch.choose_path(dispatch.kernel_code(w), num_tokens)]

    def run(name):
        code, data = operands[name]
        with dispatch.forced_path(name):
            dispatch.linear_rows_into(code, data, x, out)

    for name in operands:  # compile and warm
        run(name)
    seconds = {name: [] for name in operands}
    for _ in range(repetitions):
        for name in operands:
            seconds[name].append(timed(lambda: run(name), use_thread_time))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    weight_bytes = w.nbytes
    return {"tensor": w.name, "type": w.type_name, "shape": list(w.shape), "tokens": num_tokens, "chosen": chosen,
            "ms": {name: 1e3 * value for name, value in medians.items()},
            "gb_per_s": {name: weight_bytes / value / 1e9 for name, value in medians.items()}}


def print_table(rows: list[dict]) -> None:
    for row in rows:
        best = min(row["ms"], key=row["ms"].get)
        cells = "  ".join(f"{'*' if name == row['chosen'] else ' '}{name} {ms:8.3f} ms"
                          f"{' (best)' if name == best else ''}" for name, ms in row["ms"].items())
        print(f"{row['type']:5} {'x'.join(map(str, row['shape'])):>12} n={row['tokens']:<3} {cells}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.tier:
        os.environ["POCKET_CPU_TIER"] = args.tier
    os.environ["NUMBA_NUM_THREADS"] = str(max(1, args.threads))
    # OpenBLAS single-threaded before numpy loads, as pocketcli sets it: its own pool (2 threads here) kept spinning
    # for a while after each tiled call, and the path timed next (run, first in the order) took 3-24 ms instead of
    # ~0.1 at 8 tokens on 2 threads; with it, tiled runs as the engine runs it (sgemm on numba's threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import kernels_numba  # noqa: F401  (applies the CPU tier before numba compiles)
    from kernels_numba.cpu.ir.byte_dot import TARGET_KIND
    from kernels_numba.cpu_tier import current_tier
    from pocketcli.registry import resolve_model
    model_path = resolve_model(args.model)
    rows = [measure(w, n, args.repetitions, args.threads == 1)
            for w in distinct_weights(str(model_path)) for n in map(int, args.tokens.split(","))]
    header = {"tier": current_tier(), "byte_dot": TARGET_KIND, "threads": args.threads, "model": str(model_path)}
    if args.json:
        print(json.dumps({**header, "rows": rows}))
    else:
        print(" ".join(f"{key}={value}" for key, value in header.items()))
        print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
