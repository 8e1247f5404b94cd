"""The FastAPI app, built by a factory that tests call: `make_app(engine_loop, model_name=...)`."""
from __future__ import annotations

from fastapi import FastAPI

from ..engine.engine_loop import EngineLoop
from ..tokenizer import ChatTemplate
from .errors import install_error_handlers
from .routes import api, router
from .state import ServerState


def make_app(engine_loop: EngineLoop | None, model_name: str = "default", api_key: str | None = None,
             chat_template: ChatTemplate | None = None, tool_call_parser: str | None = None,
             reasoning_parser: str | None = None, use_model_defaults: bool = True,
             sampling_flags: dict | None = None) -> FastAPI:
    """engine_loop may be None while the model loads (then /health is 503); attach it later with
    `app.state.server.attach(engine_loop)`. Parsers: None picks them from the chat template.
    use_model_defaults: a request's unset sampling fields take the model's recommended values;
    sampling_flags (SamplingParams fields, `pocket serve --temperature ...`) come before them."""
    app = FastAPI(title="PocketLLM", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = ServerState(model_name=model_name, api_key=api_key, tool_call_parser=tool_call_parser,
                                   reasoning_parser=reasoning_parser, use_model_defaults=use_model_defaults,
                                   sampling_flags=dict(sampling_flags or {}))
    if engine_loop is not None:
        app.state.server.attach(engine_loop, chat_template)
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(api)
    return app
