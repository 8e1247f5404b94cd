"""`pocket serve`: an OpenAI-compatible HTTP server (FastAPI + uvicorn); one thread owns the engine."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import sys
import threading

from ..config import EngineConfig
from ..errors import UsageError
from .common import add_engine_arguments, add_model_argument, add_sampling_arguments, engine_config, set_cpu_threads
from .models_cmd import default_model

log = logging.getLogger("pocketcli.serve")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve the OpenAI API (chat/completions, completions, metrics)")
    add_model_argument(p, chat=True)
    add_engine_arguments(p, "serve")
    add_request_defaults(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--api-key", default=os.environ.get("POCKET_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $POCKET_API_KEY, else no key)")
    p.add_argument("--served-model-name", default=None, help="model name in the API (default: -m or registry)")
    p.add_argument("--tool-call-parser", default=None,
                   help="tool-call format: hermes, qwen, llama3_json, mistral, generic (default: from the template)")
    p.add_argument("--reasoning-parser", default=None,
                   help="split <think>...</think> into reasoning_content: think, deepseek_r1, qwen3 "
                        "(default: on when the chat template uses think tags)")
    p.set_defaults(run=run)


def add_request_defaults(parser: argparse.ArgumentParser) -> None:
    """The sampling flags, here the defaults of requests that leave a field out: a field the request sends wins,
    then the flag, then the model's recommended setting (unless --no-model-defaults), then the OpenAI API's."""
    from ..flag_spec import api_defaults
    from ..sampling_params import SamplingParams

    group = parser.add_argument_group("request defaults", "for a request that leaves the field out: the flag, "
                                      "else the model's setting, else the OpenAI API's default")
    add_sampling_arguments(group, "serve", defaults=api_defaults(SamplingParams))


def sampling_flags(args: argparse.Namespace) -> dict:
    """The sampling flags given, as SamplingParams fields."""
    from ..sampling_params import SamplingParams
    from .field_flags import given_values

    return given_values(args, SamplingParams)


def served_model_name(args: argparse.Namespace) -> str:
    if args.served_model_name:
        return args.served_model_name
    if args.model:
        return os.path.splitext(os.path.basename(args.model))[0]
    from ..registry import load_registry

    return load_registry().default_name(for_chat=True)


def make_engine_config(args: argparse.Namespace) -> EngineConfig:
    from ..registry import resolve_model

    return engine_config(args, resolve_model(args.model, for_chat=True))


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..server import make_app
    from .first_run import compile_first_run_kernels, end_side_child, rehearse_decode_step

    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be in [0, 65535], got {args.port}")
    check_parsers(args)
    set_cpu_threads(args.threads)
    args.model = args.model or default_model(for_chat=True)  # the chat default: clients send chat messages
    config = make_engine_config(args)  # bad flags and unknown models fail here, before the port opens
    code = compile_first_run_kernels(args, config.model_path, functools.partial(rehearse, config, args.threads),
                                     side_rehearsal=functools.partial(rehearse_decode_step, config))
    if code:  # a cold cache: the load and its warm-up rehearsed in child processes (first_run.py)
        return code
    end_side_child()  # the chain's warm-up decode waited for the side child's compiles: it is done or saving
    app = make_app(None, served_model_name(args), args.api_key, tool_call_parser=args.tool_call_parser,
                   reasoning_parser=args.reasoning_parser, use_model_defaults=not args.no_model_defaults,
                   sampling_flags=sampling_flags(args))
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info",
                                           timeout_graceful_shutdown=5))
    loader = threading.Thread(target=load_engine, args=(app, config, server, args.threads), daemon=True)
    loader.start()
    server.run()
    engine_loop = app.state.server.engine_loop
    if engine_loop is not None:
        engine_loop.stop()
    if app.state.server.load_error:
        raise UsageError(app.state.server.load_error)
    return 0


def check_parsers(args: argparse.Namespace) -> None:
    from ..server.reasoning import REASONING_PARSERS
    from ..server.tool_parsers import TOOL_PARSERS

    if args.tool_call_parser is not None and args.tool_call_parser not in TOOL_PARSERS:
        raise UsageError(f"--tool-call-parser must be one of {', '.join(TOOL_PARSERS)}, got {args.tool_call_parser!r}")
    if args.reasoning_parser is not None and args.reasoning_parser not in REASONING_PARSERS:
        raise UsageError(f"--reasoning-parser must be one of {', '.join(REASONING_PARSERS)}, "
                         f"got {args.reasoning_parser!r}")


def rehearse(config: EngineConfig, num_threads: int) -> None:
    """load_engine's compiling part, in a first run's child processes (commands/first_run.py): the kernels the
    load and the warm-up need go to numba's cache, and the server's own process loads them from there. On all its
    threads whatever the side child keeps busy: the server loads once the side child is done, on a quiet machine's
    threads (following the free cores, the chain ran on one thread beside it and left the server 4 parallel
    kernels to compile, 4.5 s)."""
    from ..engine.warm_up import warm_up
    from ..engine_factory import make_engine

    set_cpu_threads(num_threads)
    warm_up(make_engine(dataclasses.replace(config, follow_free_cores=False)))


def load_engine(app, config: EngineConfig, server, num_threads: int = 0) -> None:
    """Load in the background so /health can answer 503 while loading; a load failure stops the server."""
    from ..compile_progress_line import report_compiles_to_stderr
    from ..engine.engine_loop import EngineLoop
    from ..engine.warm_up import warm_up
    from ..engine_factory import make_engine

    set_cpu_threads(num_threads)  # numba's count is per thread: the EngineLoop built here hands it to its thread
    try:
        with report_compiles_to_stderr():  # its summary comes before "ready"
            engine = make_engine(config)
            warm_up(engine)  # the first request does not wait for kernels to compile or load
        app.state.server.attach(EngineLoop(engine).start())
        # llguidance's view of the vocabulary takes seconds to build: do it now, not in the first request
        threading.Thread(target=lambda: engine.structured_output.ll_tokenizer, daemon=True).start()
        print(f"pocket serve: {app.state.server.model_name} ready (context {engine.max_model_len}, "
              f"{config.max_num_seqs} sequences, {engine.block_manager.num_blocks} KV blocks)", file=sys.stderr)
    except Exception as exc:  # reported by run() as a one-line error, exit code 2
        app.state.server.load_error = str(exc)
        server.should_exit = True
