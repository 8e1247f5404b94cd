"""Pieces shared by subcommands: the model flag, loading an engine, reading the prompt."""
from __future__ import annotations

import argparse
import sys

from ..config import EngineConfig
from ..errors import UsageError
from ..registry import resolve_model


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", default=None,
                        help="GGUF file path or a name from models.toml (default: the registry's default)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")


def make_engine(args: argparse.Namespace):
    from ..engine.llm_engine import LLMEngine

    config = EngineConfig(model_path=resolve_model(args.model), ctx_size=getattr(args, "ctx_size", 4096),
                          max_num_batched_tokens=getattr(args, "batch_size", 512))
    return LLMEngine(config)


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
