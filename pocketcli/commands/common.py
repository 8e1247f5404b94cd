"""Pieces shared by subcommands: the model flag, loading an engine, reading the prompt."""
from __future__ import annotations

import argparse
import sys

from ..config import EngineConfig
from ..errors import UsageError


def add_model_argument(parser: argparse.ArgumentParser, chat: bool = False) -> None:
    default = "the registry's chat default, an instruct model" if chat else "the registry's default"
    parser.add_argument("-m", "--model", default=None,
                        help=f"GGUF file path, HF model dir or a name from models.toml (default: {default})")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """Sampling flags without a default of their own: an unset flag takes the model's recommended setting
    (GGUF general.sampling.*, generation_config.json), else ours (pocketcli/sampling_defaults.py)."""
    parser.add_argument("--temperature", "--temp", type=float, default=None,
                        help="default: the model's recommended value, else 0.8")
    parser.add_argument("--top-k", type=int, default=None, help="default: the model's, else 40 (0 disables)")
    parser.add_argument("--top-p", type=float, default=None, help="default: the model's, else 0.95")
    parser.add_argument("--min-p", type=float, default=None, help="default: the model's, else 0.05")
    parser.add_argument("--repeat-penalty", type=float, default=None, help="default: the model's, else 1.0")
    parser.add_argument("--no-model-defaults", action="store_true",
                        help="ignore the sampling settings the model file recommends (use ours for unset flags)")


def sampling_settings(args: argparse.Namespace, metadata: dict | None = None) -> dict:
    """SamplingParams keywords for the sampling fields: each flag given, else the model's setting (from
    `metadata`, unless --no-model-defaults), else the built-in default."""
    from ..sampling_defaults import SAMPLING_FIELDS, model_sampling_defaults, resolve_sampling
    from ..sampling_params import SamplingParams

    builtin = {field: getattr(SamplingParams(), field) for field in SAMPLING_FIELDS}
    use_model = metadata is not None and not getattr(args, "no_model_defaults", False)
    explicit = {field: getattr(args, field, None) for field in SAMPLING_FIELDS}
    return resolve_sampling(explicit, model_sampling_defaults(metadata) if use_model else {}, builtin)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size in tokens (0 = model's)")
    parser.add_argument("-b", "--batch-size", type=int, default=512, help="prompt tokens per prefill step")
    parser.add_argument("-t", "--threads", type=int, default=0,
                        help="most CPU threads; fewer while other processes keep cores busy, re-checked as it "
                             "runs (default 0: all the cores)")
    parser.add_argument("--backend", choices=["cpu", "reference"], default="cpu",
                        help="kernel backend (reference = slow numpy oracle, for debugging)")
    parser.add_argument("--kv-type", default="f16", metavar="TYPE",
                        help="KV cache type: f16 (default), bf16, q8_0, fp8, q4_0 or f32")
    add_device_argument(parser)
    add_parallel_arguments(parser)
    add_spec_arguments(parser)


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    from ..config import SPEC_METHODS

    parser.add_argument("--spec", choices=SPEC_METHODS, default=None,
                        help="speculative decoding: ngram (prompt lookup), draft (--draft-model), dflash, mtp")
    parser.add_argument("--spec-k", type=int, default=4, help="most draft tokens per round (default 4)")
    parser.add_argument("--draft-model", default=None, metavar="PATH",
                        help="draft model (GGUF path or registry name) sharing the target's vocabulary")


def spec_config(args: argparse.Namespace) -> dict:
    """EngineConfig keywords for the speculative-decoding flags."""
    from ..registry import resolve_model

    draft = getattr(args, "draft_model", None)
    return {"spec": getattr(args, "spec", None), "spec_k": getattr(args, "spec_k", 4),
            "draft_model_path": resolve_model(draft) if draft else None}


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tp", type=int, default=None, metavar="N",
                        help="tensor parallelism: split every weight over N ranks, one process each (default 1)")
    parser.add_argument("--devices", default=None, metavar="0,1,...",
                        help="CUDA devices of the ranks, one per rank (with --device cuda; default 0..N-1)")


def parallel_config(args: argparse.Namespace, backend: str) -> dict:
    """EngineConfig keywords for --tp / --devices (--devices alone sets the rank count); the thread count follows the
    free cores whatever --threads says (it is the most)."""
    devices = _parse_devices(getattr(args, "devices", None))
    if devices and backend != "cuda":
        raise UsageError("--devices picks CUDA devices: it needs --device cuda (CPU ranks take no device list)")
    tp_size = getattr(args, "tp", None)
    tp_size = tp_size if tp_size is not None else len(devices) or 1
    return {"tp_size": tp_size, "devices": devices, "follow_free_cores": True}


def _parse_devices(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        devices = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--devices takes comma-separated GPU numbers like 0,1, got {text!r}") from None
    if len(set(devices)) != len(devices) or min(devices) < 0:
        raise UsageError(f"--devices must list distinct GPU numbers >= 0, got {text!r}")
    return devices


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the kernels run: auto = CUDA when a usable NVIDIA GPU is present, else CPU")


def kernel_backend(args: argparse.Namespace) -> str:
    """The kernels_numba backend for --device / --backend (raises DeviceUnavailableError for an absent GPU)."""
    from ..device import backend_for, resolve_device

    return backend_for(resolve_device(getattr(args, "device", "cpu")), args.backend)


def make_engine(args: argparse.Namespace):
    from ..engine.llm_engine import LLMEngine
    from ..parallel import make_rank_group
    from ..registry import resolve_model

    set_cpu_threads(args.threads)
    backend = kernel_backend(args)
    config = EngineConfig(model_path=resolve_model(args.model), ctx_size=args.ctx_size,
                          max_num_batched_tokens=args.batch_size, backend=backend,
                          enable_prefix_caching=getattr(args, "prefix_caching", True), kv_type=args.kv_type,
                          **spec_config(args),
                          **parallel_config(args, backend))
    return LLMEngine(config, rank_group_factory=make_rank_group)


def set_cpu_threads(num_threads: int) -> None:
    """--threads N: at most N (and numba's pool); 0 leaves the pool's size. The engine runs fewer while other
    processes keep cores busy (EngineConfig.follow_free_cores, kernels_numba.cpu.free_cores): a parallel region
    waits for its slowest thread, and a thread sharing a core with a busy process waits a time slice at each of the
    ~180 regions of a token (tg128 at -t 2 beside one spinning process: 1.8 tok/s, at one thread 14)."""
    if num_threads < 0:
        raise UsageError(f"--threads must be >= 0, got {num_threads}")
    if num_threads:
        import numba

        numba.set_num_threads(min(num_threads, numba.config.NUMBA_NUM_THREADS))


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None and args.file is not None:
        raise UsageError("give the prompt with -p or -f, not both")
    if args.prompt is not None:
        return args.prompt
    if args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read prompt file {args.file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"prompt file {args.file} is not UTF-8 text") from None
    if not sys.stdin.isatty():
        return sys.stdin.read()
    raise UsageError("no prompt: pass -p TEXT, -f FILE or pipe text on stdin")
