"""`pocket chat`: the Textual chat app, or with --plain (or stdin not a terminal) a plain REPL."""
from __future__ import annotations

import argparse
import functools
import importlib
import sys

from ..config import EngineConfig
from ..errors import UsageError
from .common import (add_engine_arguments, add_model_argument, add_sampling_arguments, engine_config,
                     sampling_settings, set_cpu_threads)
from .models_cmd import default_model

# The Textual app sits above pocketcli (tui imports pocketcli.chat): named here, bound only when launched, so
# imports flow one way (tests/test_import_graph.py) and pocketcli works without tui. The binary lists it as a
# hidden import (build/pocket.spec).
CHAT_APP = "tui:run_chat_app"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("chat", help="chat with a model (Textual app; --plain for a simple REPL)")
    add_model_argument(p, chat=True)
    from ..chat.session import ChatSettings

    p.add_argument("--system", default="", help="system prompt")
    add_sampling_arguments(p, "chat", defaults=ChatSettings)
    add_engine_arguments(p, "chat")
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
    from ..chat.session import ChatSession, ChatSettings

    settings = ChatSettings(system=args.system, **sampling_settings(args, model_metadata(args.model), ChatSettings))
    config = engine_config(args, model_path="")  # the settings of each model the chat loads
    options = {name: value for name, value in vars(config).items() if name != "model_path"}
    return ChatSession(model=args.model, settings=settings, engine_options=options, autosave=not args.no_save)


def rehearse(model: str, engine_options: dict) -> None:
    """The session's load (ChatSession._make_engine: the engine and a first turn's warm-up) in a first run's child
    processes (commands/first_run.py): its kernels go to the cache, and the chat's own process loads them."""
    from ..engine.warm_up import CHAT_WARM_UP_TOKENS, warm_up
    from ..engine_factory import make_engine
    from ..registry import resolve_model

    warm_up(make_engine(EngineConfig(model_path=resolve_model(model, for_chat=True), **engine_options)),
            CHAT_WARM_UP_TOKENS)


class AppFirstRun:
    """A cold cache's first run for the chat app: the load's kernels compile in child processes (first_run.py)
    while the app's screen is up, their progress in its status bar. The session calls it on its engine thread
    before each load (a model picked later may be a first run too); cancel() kills the child at work."""

    def __init__(self, args: argparse.Namespace, engine_options: dict):
        self.args, self.engine_options = args, engine_options
        self.chain = None
        self.is_cancelled = False

    def __call__(self, model: str | None, on_progress) -> None:
        from ..registry import resolve_model
        from .first_run import ChildChain, cold_stamp, rehearse_decode_step

        model_path = resolve_model(model, for_chat=True)
        stamp = cold_stamp(self.args, model_path)
        if stamp is None or self.is_cancelled:
            return
        self.chain = ChildChain(on_progress)
        self.chain.run(functools.partial(rehearse, model, self.engine_options), stamp,
                       side_rehearsal=functools.partial(rehearse_decode_step,
                                                        EngineConfig(model_path=model_path, **self.engine_options)))

    def cancel(self) -> None:
        self.is_cancelled = True
        if self.chain is not None:
            self.chain.cancel()


def run(args: argparse.Namespace) -> int:
    from ..registry import resolve_model
    from .first_run import compile_first_run_kernels, end_side_child, rehearse_decode_step

    set_cpu_threads(args.threads)
    args.model = args.model or default_model(for_chat=True)  # an instruct model: the base default cannot chat
    session = make_session(args)
    if sys.stdin.isatty() and not args.plain:  # the app: a first run compiles while its screen is up
        session.first_run = AppFirstRun(args, session.engine_options)
        return launch_chat_app(session)
    rehearsal = functools.partial(rehearse, args.model, session.engine_options)
    model_path = resolve_model(args.model, for_chat=True)
    side_rehearsal = functools.partial(rehearse_decode_step, EngineConfig(model_path=model_path,
                                                                          **session.engine_options))
    code = compile_first_run_kernels(args, model_path, rehearsal, side_rehearsal=side_rehearsal)
    if code:  # a cold cache: compiled in child processes before the chat loads (its progress line on stderr)
        return code
    end_side_child()  # the chain's decode waited for the side child's compiles: it is done or saving
    if not sys.stdin.isatty():
        text = sys.stdin.read().strip()
        if not text:
            raise UsageError("no prompt on stdin")
        from ..chat.repl import run_pipe

        return run_pipe(session, text)
    from ..chat.repl import run_repl

    return run_repl(session)


def launch_chat_app(session) -> int:
    module_name, _, function_name = CHAT_APP.partition(":")
    return getattr(importlib.import_module(module_name), function_name)(session)
