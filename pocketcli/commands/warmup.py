"""`pocket warmup`: compile the CPU kernels a model needs, for this CPU's tier, before its first run.

A pip install compiles its kernels on first use: minutes on a laptop, inside the first request. This fills
numba's cache beforehand. Phase 1 compiles the model's heavy leaf kernels (kernels_numba.cpu.matvec.dispatch:
leaf_jobs, compile_leaf) in a pool of processes, one per core; phase 2 runs the engine's own warm-up in this
process (engine/warm_up.py: a throwaway prompt and a decode step), which loads those leaves from the cache and
compiles every kernel still missing. Takes the engine flags of `pocket generate`, so the same kernels compile.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING

from ..errors import UsageError
from .common import add_engine_arguments, add_model_argument, make_engine

if TYPE_CHECKING:  # imported where used: `pocket --help` builds this parser
    from concurrent.futures import Future, ProcessPoolExecutor


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("warmup", help="compile the CPU kernels a model needs ahead of its first run")
    add_model_argument(p)
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="processes compiling kernels at once (default: one per core)")
    add_engine_arguments(p, "warmup")
    p.set_defaults(run=run, device="cpu")  # numba's CPU cache is what this fills


def run(args: argparse.Namespace) -> int:
    from kernels_numba.cpu_tier import current_tier

    from ..version_report import numba_cache_dir

    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    if args.threads == 0:  # every thread, not the cores left free: on one the parallel kernels would not compile
        args.threads = os.cpu_count() or 1
    started = time.perf_counter()
    pool, leaf_compiles = submit_leaf_compiles(args)  # forks the workers before the progress bar starts a thread
    with make_progress() as progress:
        with pool:
            track(progress, "leaf kernels", leaf_compiles)
        warm_up_engine(args, progress)
    leave_first_run_stamp(args)
    print(f"warm-up done in {time.perf_counter() - started:.1f} s (CPU tier {current_tier()}); "
          f"kernels cached in {numba_cache_dir()}")
    return 0


def leave_first_run_stamp(args: argparse.Namespace) -> None:
    """The model's kernels are cached now: its first `pocket generate` need not rehearse in children first
    (pocketcli/commands/first_run.py)."""
    from ..first_run_stamp import stamp_path, write_stamp
    from ..registry import resolve_model

    stamp = stamp_path(resolve_model(args.model))
    if stamp is not None:
        write_stamp(stamp)


def make_progress():
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True))


def model_leaf_jobs(args: argparse.Namespace) -> list:
    """The leaf kernels (dispatch.LeafJob) the model's weights need on this CPU tier, over 1..-b tokens."""
    from kernels_numba import leaf_jobs

    from ..model_source import open_model_file
    from ..registry import resolve_model

    model_file = open_model_file(resolve_model(args.model))
    return leaf_jobs([model_file.tensor(name) for name in model_file.tensor_infos], args.max_num_batched_tokens)


def submit_leaf_compiles(args: argparse.Namespace) -> tuple[ProcessPoolExecutor, list[Future]]:
    """Phase 1: the model's leaf kernels, each compiled into numba's cache by a worker process."""
    from concurrent.futures import ProcessPoolExecutor

    from kernels_numba import compile_leaf

    from ..cache_save_lock import CAN_LOCK, lock_cache_saves

    jobs = model_leaf_jobs(args)
    num_workers = min(args.jobs if CAN_LOCK else 1, len(jobs))  # unlocked saves of one kernel would race
    pool = ProcessPoolExecutor(max_workers=max(1, num_workers), initializer=lock_cache_saves)
    return pool, [pool.submit(compile_leaf, job) for job in jobs]


def track(progress, description: str, futures: list[Future]) -> None:
    from concurrent.futures import as_completed

    if not futures:
        return
    task = progress.add_task(description, total=len(futures))
    for finished in as_completed(futures):
        finished.result()  # a worker's error ends the warm-up with it
        progress.advance(task)


def warm_up_engine(args: argparse.Namespace, progress) -> None:
    """Phase 2: load the model and run the engine's warm-up on every thread, then on one (a run follows the cores
    other processes leave free, and one thread takes the serial kernels), counting the kernels that compile."""
    import numba

    from kernels_numba.compile_events import listen_to_compiles

    from ..engine.warm_up import warm_up

    task = progress.add_task("engine warm-up", total=None)
    compiled = []

    def count(event) -> None:  # numba's compiling thread: only quick work here
        if not event.is_start and not event.is_failed:
            compiled.append(event.kernel)
            progress.update(task, description=f"engine warm-up: {len(compiled)} compiled, last {event.kernel}")

    with listen_to_compiles(count):
        engine = make_engine(args)
        warm_up(engine)
        numba.set_num_threads(1)
        warm_up(engine)
    progress.update(task, description=f"engine warm-up: {len(compiled)} compiled", total=1, completed=1)
