"""`pocket serve`: an OpenAI-compatible HTTP server (FastAPI + uvicorn); one thread owns the engine."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading

from ..config import EngineConfig
from ..errors import UsageError
from .common import (add_engine_arguments, add_model_argument, kernel_backend, parallel_config, set_cpu_threads,
                     spec_config)
from .models_cmd import default_model

log = logging.getLogger("pocketcli.serve")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve the OpenAI API (chat/completions, completions, metrics)")
    add_model_argument(p, chat=True)
    add_engine_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--max-num-seqs", type=int, default=8, help="sequences decoded together (default 8)")
    p.add_argument("--api-key", default=os.environ.get("POCKET_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $POCKET_API_KEY, else no key)")
    p.add_argument("--served-model-name", default=None, help="model name in the API (default: -m or registry)")
    p.add_argument("--no-prefix-caching", action="store_true", help="disable automatic prefix caching")
    p.add_argument("--tool-call-parser", default=None,
                   help="tool-call format: hermes, qwen, llama3_json, mistral, generic (default: from the template)")
    p.add_argument("--reasoning-parser", default=None,
                   help="split <think>...</think> into reasoning_content: think, deepseek_r1, qwen3 "
                        "(default: on when the chat template uses think tags)")
    p.add_argument("--no-model-defaults", action="store_true",
                   help="requests without temperature/top_p/top_k/min_p/repetition_penalty get the API's defaults, "
                        "not the model's recommended ones")
    p.set_defaults(run=run)


def served_model_name(args: argparse.Namespace) -> str:
    if args.served_model_name:
        return args.served_model_name
    if args.model:
        return os.path.splitext(os.path.basename(args.model))[0]
    from ..registry import load_registry

    return load_registry().default_name(for_chat=True)


def make_engine_config(args: argparse.Namespace) -> EngineConfig:
    from ..registry import resolve_model

    backend = kernel_backend(args)
    return EngineConfig(model_path=resolve_model(args.model, for_chat=True), ctx_size=args.ctx_size,
                        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.batch_size,
                        backend=backend, enable_prefix_caching=not args.no_prefix_caching, kv_type=args.kv_type,
                        **spec_config(args), **parallel_config(args, backend))


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..server import make_app

    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be in [0, 65535], got {args.port}")
    check_parsers(args)
    set_cpu_threads(args.threads)
    args.model = args.model or default_model(for_chat=True)  # the chat default: clients send chat messages
    config = make_engine_config(args)  # bad flags and unknown models fail here, before the port opens
    app = make_app(None, served_model_name(args), args.api_key, tool_call_parser=args.tool_call_parser,
                   reasoning_parser=args.reasoning_parser, use_model_defaults=not args.no_model_defaults)
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


def load_engine(app, config: EngineConfig, server, num_threads: int = 0) -> None:
    """Load in the background so /health can answer 503 while loading; a load failure stops the server."""
    from ..compile_progress_line import report_compiles_to_stderr
    from ..engine.engine_loop import EngineLoop
    from ..engine.llm_engine import LLMEngine
    from ..engine.warm_up import warm_up
    from ..parallel import make_rank_group

    set_cpu_threads(num_threads)  # numba's count is per thread: the EngineLoop built here hands it to its thread
    try:
        with report_compiles_to_stderr():  # its summary comes before "ready"
            engine = LLMEngine(config, rank_group_factory=make_rank_group)
            warm_up(engine)  # the first request does not wait for kernels to compile or load
        app.state.server.attach(EngineLoop(engine).start())
        # llguidance's view of the vocabulary takes seconds to build: do it now, not in the first request
        threading.Thread(target=lambda: engine.structured_output.ll_tokenizer, daemon=True).start()
        print(f"pocket serve: {app.state.server.model_name} ready (context {engine.max_model_len}, "
              f"{config.max_num_seqs} sequences, {engine.block_manager.num_blocks} KV blocks)", file=sys.stderr)
    except Exception as exc:  # reported by run() as a one-line error, exit code 2
        app.state.server.load_error = str(exc)
        server.should_exit = True
