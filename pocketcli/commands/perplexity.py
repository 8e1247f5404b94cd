"""`pocket perplexity`: llama-perplexity-style perplexity of a text file (pocketcli/engine/perplexity.py)."""
from __future__ import annotations

import argparse
import json
import sys
import time

from ..errors import UsageError
from .common import add_engine_arguments, add_model_argument, make_engine


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("perplexity", help="perplexity of a text file, as llama.cpp's llama-perplexity")
    add_model_argument(p)
    p.add_argument("-f", "--file", required=True, help="text file to score (e.g. bench/texts/botchan.txt)")
    add_engine_arguments(p, "perplexity", ctx_size=512)  # llama-perplexity's default window
    p.add_argument("--chunks", type=int, default=0, help="score at most this many windows (default: all)")
    p.add_argument("--kl-base", default=None, metavar="TYPE",
                   help="also score each window with a KV cache of TYPE (e.g. f32; the model loads twice) and report "
                        "the KL divergence from it, top-token agreement and ln(PPL / its PPL)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None


def run(args: argparse.Namespace) -> int:
    from ..engine.perplexity import make_windows, stream_divergence, stream_perplexity

    if args.ctx_size < 4 or args.chunks < 0:
        raise UsageError("perplexity needs --ctx-size >= 4 and --chunks >= 0")
    check_kl_base(args.kl_base)
    text = read_text(args.file)
    engine = make_engine(args, enable_prefix_caching=False)  # windows share no prefix but BOS
    windows = make_windows(engine.tokenizer.encode(text, add_special=False), args.ctx_size,
                           engine.tokenizer.bos_id, args.chunks)
    started = time.perf_counter()
    estimate = divergence = None
    if args.kl_base is None:
        results = ((estimate, None) for estimate in stream_perplexity(engine, windows))
    else:
        base_engine = make_engine(argparse.Namespace(**{**vars(args), "kv_type": args.kl_base}))
        results = stream_divergence(engine, base_engine, windows)
    for estimate, divergence in results:
        if not args.json:
            print(f"[{estimate.num_windows}]{estimate.perplexity:.4f},", end="", flush=True)
    seconds = time.perf_counter() - started
    if args.json:
        report = {"model": engine.model_file.path, "kv_type": engine.config.kv_type, "ctx": args.ctx_size,
                  "windows": estimate.num_windows, "scored_tokens": estimate.num_scored,
                  "perplexity": round(estimate.perplexity, 6), "uncertainty": round(estimate.uncertainty, 6),
                  "seconds": round(seconds, 2)}
        print(json.dumps(report if divergence is None else {**report, **divergence_report(args.kl_base, divergence)}))
        return 0
    print()
    print(f"Final estimate: PPL = {estimate.perplexity:.4f} +/- {estimate.uncertainty:.5f}")
    if divergence is not None:
        print(f"vs KV {args.kl_base}: mean KL {divergence.mean_kl:.6f}, same top token "
              f"{100 * divergence.top_agreement:.2f}%, ln(PPL / PPL {args.kl_base}) = {divergence.log_ratio:+.5f} "
              f"+/- {divergence.log_ratio_uncertainty:.5f}")
    print(f"{estimate.num_windows} windows of {args.ctx_size} tokens, {estimate.num_scored} scored, "
          f"KV {engine.config.kv_type}, {seconds:.1f} s", file=sys.stderr)
    return 0


def check_kl_base(name: str | None) -> None:
    from kernels_numba.kv_type import kv_type_named

    try:
        if name is not None:
            kv_type_named(name)
    except ValueError as exc:
        raise UsageError(str(exc).replace("--kv-type", "--kl-base")) from None


def divergence_report(base_type: str, divergence) -> dict:
    return {"kl_base": base_type, "mean_kl": round(divergence.mean_kl, 8),
            "top_token_agreement": round(divergence.top_agreement, 6), "log_ppl_ratio": round(divergence.log_ratio, 8),
            "log_ppl_ratio_uncertainty": round(divergence.log_ratio_uncertainty, 8)}
