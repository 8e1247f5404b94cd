"""`pocket bench`: llama-bench-style prompt (pp) and generation (tg) speed, mean ± stdev, peak RSS."""
from __future__ import annotations

import argparse
import functools
import json

from .common import add_engine_arguments, add_model_argument, engine_config, make_engine


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure prompt and generation speed")
    add_model_argument(p)
    add_engine_arguments(p, "bench")
    p.add_argument("-p", "--n-prompt", type=int, default=512, help="prompt tokens for the pp test (0 = skip)")
    p.add_argument("-n", "--n-gen", type=int, default=128, help="generated tokens for the tg test (0 = skip)")
    p.add_argument("-r", "--repetitions", type=int, default=3, help="repetitions per test")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def kv_report(engine) -> dict:
    """The KV cache's type, bytes per token, and the tokens of it the free RAM would hold."""
    from ..engine.kv_memory import available_ram_bytes, context_that_fits

    per_token, free = engine.kv_cache.bytes_per_token, available_ram_bytes() or 0
    return {"kv_type": engine.kv_cache.kv_type, "kv_bytes_per_token": per_token, "free_ram_bytes": free,
            "kv_tokens_that_fit": context_that_fits(free, per_token)}


def rehearse(args: argparse.Namespace) -> None:
    """A first run's rehearsal in child processes (commands/first_run.py): the load and one short round of each
    test, so that the measured process loads its kernels from the cache (its peak RSS then holds no compiles). On
    all its threads whatever the side child keeps busy: the bench runs after the side child, on a quiet machine's."""
    from ..engine.benchmark import run_benchmark

    engine = make_engine(args, enable_prefix_caching=False, follow_free_cores=False)
    run_benchmark(engine, args.n_prompt, min(args.n_gen, 2), 1, warmup=False)


def run(args: argparse.Namespace) -> int:
    from ..registry import resolve_model
    from .first_run import compile_first_run_kernels, end_side_child, rehearse_decode_step

    if args.repetitions < 1 or args.n_prompt < 0 or args.n_gen < 0:
        raise ValueError("bench needs -r >= 1, -p >= 0 and -n >= 0")
    # like llama-bench: a context just big enough for the test, so the KV cache is sized as llama.cpp's is
    args.ctx_size = args.n_prompt + args.n_gen + 16
    model_path = resolve_model(args.model)
    code = compile_first_run_kernels(args, model_path, functools.partial(rehearse, args),
                                     side_rehearsal=functools.partial(rehearse_decode_step,
                                                                      engine_config(args, model_path)))
    if code:  # a cold cache: compiled in child processes before numba is imported here
        return code
    end_side_child()  # the chain's decode waited for the side child's compiles: it is done or saving
    import numba

    from ..compile_progress_line import report_compiles_to_stderr
    from ..engine.benchmark import peak_rss_bytes, run_benchmark
    from ..parallel.parallel_report import format_parallel_report, parallel_report, reset_parallel_counters

    with report_compiles_to_stderr():  # kernels compile in the load and the warm-up run (cold cache)
        engine = make_engine(args, enable_prefix_caching=False)  # every repetition must really process its prompt
        if getattr(engine, "rank_group", None) is not None:  # every rank loads its kernels first: not in the shares
            run_benchmark(engine, min(args.n_prompt, 8), min(args.n_gen, 2), 1, warmup=False)
            reset_parallel_counters(engine)
        results = run_benchmark(engine, args.n_prompt, args.n_gen, args.repetitions)
    rss_mib = peak_rss_bytes() / 2**20
    threads = numba.get_num_threads()
    model_file = engine.model_file
    tp_report = parallel_report(engine)  # None without --tp
    kv = kv_report(engine)
    if args.json:
        extra = {"tensor_parallel": tp_report} if tp_report else {}
        print(json.dumps({"model": model_file.path, "backend": engine.config.backend, "threads": threads,
                          "results": [r.as_dict() for r in results], "peak_rss_mib": round(rss_mib, 1), **kv,
                          **extra}))
        return 0
    name = model_file.metadata.get("general.name", model_file.path)
    size_mib = model_file.file_size / 2**20
    print(f"| {'model':<24} | {'size':>9} | {'backend':>7} | {'threads':>7} | {'test':>6} | {'t/s':>16} |")
    print(f"| {'-' * 24} | {'-' * 8}: | {'-' * 6}: | {'-' * 6}: | {'-' * 5}: | {'-' * 15}: |")
    for r in results:
        rate = f"{r.mean:.2f} ± {r.stdev:.2f}"
        print(f"| {name[:24]:<24} | {size_mib:>5.1f} MiB | {engine.config.backend:>7} | {threads:>7} | "
              f"{r.test:>6} | {rate:>16} |")
    print(f"peak RSS: {rss_mib:.1f} MiB")
    print(f"KV cache: {kv['kv_type']}, {kv['kv_bytes_per_token'] / 2**10:.1f} KiB a token; "
          f"{kv['kv_tokens_that_fit']} tokens fit in the {kv['free_ram_bytes'] / 2**30:.1f} GiB of free RAM")
    for line in format_parallel_report(tp_report) if tp_report else []:
        print(line)
    return 0
