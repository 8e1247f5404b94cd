"""Pieces shared by subcommands: the model flag, loading an engine, reading the prompt."""
from __future__ import annotations

import argparse
import sys

from ..config import EngineConfig
from ..errors import UsageError
from .field_flags import add_field_flags, default_in, describe as describe_default, flag_values, given_values


def add_model_argument(parser: argparse.ArgumentParser, chat: bool = False) -> None:
    default = "the registry's chat default, an instruct model" if chat else "the registry's default"
    parser.add_argument("-m", "--model", default=None,
                        help=f"GGUF file path, HF model dir or a name from models.toml (default: {default})")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")


def add_sampling_arguments(parser: argparse.ArgumentParser, command: str, defaults=None) -> None:
    """A flag for every SamplingParams flag field, without a default of its own: an unset flag takes the model's
    recommended setting (GGUF general.sampling.*, generation_config.json) where it has one, else `defaults`
    (SamplingParams, or chat's ChatSettings)."""
    from ..sampling_defaults import SAMPLING_FIELDS
    from ..sampling_params import SamplingParams

    def describe(name, value):
        ours = describe_default(value).removeprefix("default: ") or "none"
        return f"default: the model's, else {ours}" if name in SAMPLING_FIELDS else describe_default(value)

    add_field_flags(parser, SamplingParams, command, defaults or SamplingParams, unset=True,
                    describe_default=describe)
    parser.add_argument("--no-model-defaults", action="store_true",
                        help="ignore the sampling settings the model file recommends (use ours for unset flags)")


def sampling_settings(args: argparse.Namespace, metadata: dict | None = None, defaults=None) -> dict:
    """SamplingParams keywords for every sampling flag: each flag given, else the model's setting (from
    `metadata`, unless --no-model-defaults), else `defaults`' (SamplingParams' when None)."""
    from ..sampling_defaults import model_sampling_defaults, resolve_sampling
    from ..sampling_params import SamplingParams

    builtin = {name: default_in(defaults or SamplingParams, name) for name in flag_values(args, SamplingParams)}
    use_model = metadata is not None and not getattr(args, "no_model_defaults", False)
    return resolve_sampling(given_values(args, SamplingParams),
                            model_sampling_defaults(metadata) if use_model else {}, builtin)


def add_engine_arguments(parser: argparse.ArgumentParser, command: str, **defaults) -> None:
    """A flag for every EngineConfig flag field `command` takes (defaults: the command's own, where it has one),
    and the thread and device flags."""
    parser.add_argument("-t", "--threads", type=int, default=0,
                        help="most CPU threads; fewer while other processes keep cores busy, re-checked as it "
                             "runs (default 0: all the cores)")
    add_field_flags(parser, EngineConfig, command, defaults)
    add_device_argument(parser)


def engine_config(args: argparse.Namespace, model_path: str, **overrides) -> EngineConfig:
    """The EngineConfig the engine flags ask for: --device and --backend pick the kernels, --draft-model goes
    through the registry, --devices is parsed, and the thread count follows the free cores (--threads is the most)."""
    from ..registry import resolve_model

    settings = flag_values(args, EngineConfig)
    backend = kernel_backend(args)
    devices = parse_devices(settings.get("devices"))
    if devices and backend != "cuda":
        raise UsageError("--devices picks CUDA devices: it needs --device cuda (CPU ranks take no device list)")
    tp_size = settings.get("tp_size")
    draft = settings.get("draft_model_path")
    settings.update(backend=backend, devices=devices, tp_size=tp_size if tp_size is not None else len(devices) or 1,
                    draft_model_path=resolve_model(draft) if draft else None, follow_free_cores=True)
    settings.update(overrides)  # a first run's rehearsal runs on all threads (follow_free_cores=False)
    return EngineConfig(model_path=model_path, **settings)


def parse_devices(text: str | None) -> tuple[int, ...]:
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


def make_engine(args: argparse.Namespace, **overrides):
    """The engine the flags ask for (pocketcli/engine_factory.py), with the --threads count set first."""
    from ..engine_factory import make_engine as make_engine_from_config
    from ..registry import resolve_model

    set_cpu_threads(args.threads)
    return make_engine_from_config(engine_config(args, resolve_model(args.model), **overrides))


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
