"""`pocket chat`: the Textual chat app, or with --plain (or stdin not a terminal) a plain REPL."""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import UsageError
from .common import (add_engine_arguments, add_model_argument, add_sampling_arguments, kernel_backend,
                     parallel_config, sampling_settings, set_cpu_threads, spec_config)
from .models_cmd import default_model

# The Textual app sits above pocketcli (tui imports pocketcli.chat): named here, bound only when launched, so
# imports flow one way (tests/test_import_graph.py) and pocketcli works without tui. The binary lists it as a
# hidden import (build/pocket.spec).
CHAT_APP = "tui:run_chat_app"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("chat", help="chat with a model (Textual app; --plain for a simple REPL)")
    add_model_argument(p, chat=True)
    p.add_argument("--system", default="", help="system prompt")
    p.add_argument("-n", "--max-tokens", type=int, default=512, help="tokens per reply at most (default 512)")
    add_sampling_arguments(p)
    p.add_argument("--seed", type=int, default=None)
    add_engine_arguments(p)
    p.add_argument("--plain", action="store_true", help="plain prompt_toolkit REPL instead of the Textual app")
    p.add_argument("--no-save", action="store_true", help="do not save the conversation")
    p.set_defaults(run=run)


def model_metadata(model: str | None) -> dict | None:
    """The model file's metadata (its header only: the engine opens it again when it loads) for its recommended
    sampling settings; None where it cannot be read yet (the load then reports why)."""
    from gguf_loader import ModelFileError

    from ..model_source import open_model_file
    from ..registry import resolve_model

    try:
        return open_model_file(resolve_model(model, for_chat=True)).metadata
    except (ModelFileError, OSError):
        return None


def make_session(args: argparse.Namespace):
    from ..chat.session import ChatSession, ChatSettings, EngineOptions

    settings = ChatSettings(system=args.system, max_tokens=args.max_tokens, seed=args.seed,
                            **sampling_settings(args, model_metadata(args.model)))
    backend = kernel_backend(args)
    options = EngineOptions(ctx_size=args.ctx_size, batch_size=args.batch_size, backend=backend,
                            kv_type=args.kv_type,
                            spec=tuple(spec_config(args).items()),
                            parallel=tuple(parallel_config(args, backend).items()))
    return ChatSession(model=args.model, settings=settings, engine_options=options, autosave=not args.no_save)


def run(args: argparse.Namespace) -> int:
    set_cpu_threads(args.threads)
    args.model = args.model or default_model(for_chat=True)  # an instruct model: the base default cannot chat
    session = make_session(args)
    if not sys.stdin.isatty():
        text = sys.stdin.read().strip()
        if not text:
            raise UsageError("no prompt on stdin")
        from ..chat.repl import run_pipe

        return run_pipe(session, text)
    if args.plain:
        from ..chat.repl import run_repl

        return run_repl(session)
    return launch_chat_app(session)


def launch_chat_app(session) -> int:
    module_name, _, function_name = CHAT_APP.partition(":")
    return getattr(importlib.import_module(module_name), function_name)(session)
