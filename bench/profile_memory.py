"""Where the resident memory of an engine goes: RSS (anonymous / file-backed) and peak RSS after each phase.

    python bench/profile_memory.py [-m MODEL] [-p 512] [-n 128] [--threads N] [--ctx-size N] [--tracemalloc]

Phases: imports, GGUF open, tokenizer, kernels (numba cache load), weights, KV cache, then the runs of
`pocket bench -r 1` (pp warm-up and timed, tg warm-up and timed). The engine's own loading steps are wrapped
(not re-implemented), so the figures are those of `pocket bench`.
File-backed RSS is mostly memory-mapped weight pages (llama.cpp has them too); anonymous RSS is what the
process allocated, of it `huge` in transparent huge pages (the regrouped weights: weight_arena.py). Of the
file-backed part, the columns model (the model file's mapping) and LLVM .so (libllvmlite's code pages numba
touched) are split out.
`--tracemalloc` adds the Python-heap bytes live after each phase (slower).
"""
from __future__ import annotations

import argparse
import resource
import time
import tracemalloc


def memory_mib() -> dict[str, float]:
    """Current RSS, its anonymous and file-backed parts, and the peak so far (MiB), from /proc."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rss": fields["Rss"], "anon": fields["Anonymous"], "huge": fields.get("AnonHugePages", 0.0),
            "file": fields["Rss"] - fields["Anonymous"], "peak": peak, **mapped_mib()}


def mapping_kind(path: str) -> str | None:
    """The file-backed mappings worth a column: the model file, LLVM's library."""
    if path.endswith((".gguf", ".safetensors")):
        return "model"
    return "llvm" if "llvmlite" in path else None


def mapped_mib() -> dict[str, float]:
    """Resident MiB of the model file's mappings and of libllvmlite (/proc/self/smaps)."""
    totals, kind = {"model": 0.0, "llvm": 0.0}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                kind = mapping_kind(parts[5]) if len(parts) > 5 else None
            elif kind and parts[0] == "Rss:":
                totals[kind] += int(parts[1]) / 1024
    return totals


class PhaseLog:
    def __init__(self, trace_python: bool):
        self.trace_python = trace_python
        self.rows: list[tuple[str, dict[str, float], float | None]] = []
        self.started = time.perf_counter()

    def mark(self, phase: str) -> None:
        python_mib = tracemalloc.get_traced_memory()[0] / 2**20 if self.trace_python else None
        self.rows.append((phase, memory_mib(), python_mib))

    def wrap(self, module, name: str, phase: str) -> None:
        """Replace module.name by a wrapper that marks `phase` after each call."""
        target = getattr(module, name)

        def marked(*args, **kwargs):
            result = target(*args, **kwargs)
            self.mark(phase)
            return result

        setattr(module, name, marked)

    def print(self) -> None:
        columns = ("rss", "anon", "huge", "file", "model", "llvm", "peak")
        names = ("RSS", "anon", "huge", "file", "model", "LLVM .so", "peak")
        print(f"| {'after':<22} | " + " | ".join(f"{name:>8}" for name in names) + f" | {'py heap':>7} |")
        print(f"| {'-' * 22} | " + " | ".join(f"{'-' * 7}:" for _ in names) + f" | {'-' * 6}: |")
        for phase, m, py in self.rows:
            py_text = f"{py:7.1f}" if py is not None else "      -"
            print(f"| {phase:<22} | " + " | ".join(f"{m[c]:8.1f}" for c in columns) + f" | {py_text} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ctx-size", type=int, default=None, help="default: as pocket bench (p + n + 16)")
    ap.add_argument("--tracemalloc", action="store_true", help="also trace Python heap bytes")
    args = ap.parse_args()
    if args.tracemalloc:
        tracemalloc.start()
    log = PhaseLog(args.tracemalloc)
    log.mark("start")

    import numba

    from pocketcli.config import EngineConfig
    from pocketcli.engine import benchmark, llm_engine
    from pocketcli.registry import resolve_model

    log.mark("imports")
    log.wrap(llm_engine, "open_model_file", "GGUF open")
    log.wrap(llm_engine, "make_tokenizer", "tokenizer")
    log.wrap(llm_engine, "get_ops", "kernels (numba load)")
    log.wrap(llm_engine, "make_model", "weights")
    log.wrap(llm_engine, "make_kv_cache", "KV cache")
    if args.threads:
        numba.set_num_threads(args.threads)
    ctx_size = args.ctx_size if args.ctx_size is not None else args.n_prompt + args.n_gen + 16
    engine = llm_engine.LLMEngine(EngineConfig(model_path=resolve_model(args.model), ctx_size=ctx_size,
                                               enable_prefix_caching=False))
    log.mark("engine ready")
    # the runs of `pocket bench -r 1`: a warm-up and a timed run of each test
    if args.n_prompt:
        prompt = benchmark.random_prompt(engine, args.n_prompt)
        for run in ("warm-up", "timed"):
            benchmark.time_prompt_processing(engine, prompt)
            log.mark(f"pp{args.n_prompt} {run}")
    if args.n_gen:
        benchmark.time_token_generation(engine, min(args.n_gen, 8))
        log.mark("tg8 warm-up")
        benchmark.time_token_generation(engine, args.n_gen)
        log.mark(f"tg{args.n_gen} timed")
    log.print()
    if args.tracemalloc:
        print("largest Python allocations (by line):")
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:15]:
            print(f"  {stat.size / 2**20:7.1f} MiB  {stat.traceback}")


if __name__ == "__main__":
    main()
