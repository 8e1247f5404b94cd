"""`pocket chat`: the Textual chat app, or with --plain (or stdin not a terminal) a plain REPL."""
from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from .common import (add_engine_arguments, add_model_argument, kernel_backend, parallel_config, set_cpu_threads,
                     spec_config)
from .models_cmd import default_model


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("chat", help="chat with a model (Textual app; --plain for a simple REPL)")
    add_model_argument(p, chat=True)
    p.add_argument("--system", default="", help="system prompt")
    p.add_argument("-n", "--max-tokens", type=int, default=512, help="tokens per reply at most (default 512)")
    p.add_argument("--temperature", "--temp", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=None)
    add_engine_arguments(p)
    p.add_argument("--plain", action="store_true", help="plain prompt_toolkit REPL instead of the Textual app")
    p.add_argument("--no-save", action="store_true", help="do not save the conversation")
    p.set_defaults(run=run)


def make_session(args: argparse.Namespace):
    from ..chat.session import ChatSession, ChatSettings, EngineOptions

    settings = ChatSettings(system=args.system, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            min_p=args.min_p, max_tokens=args.max_tokens, seed=args.seed)
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
    from tui import make_app  # the app sits above pocketcli; imported only when asked for

    make_app(session=session).run()
    return 0
