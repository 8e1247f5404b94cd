"""What the app knows: the model name, the engine loop (None while loading), the metrics and the API key."""
from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field

from fastapi import Request

from ..engine.engine_loop import EngineLoop
from ..sampling_defaults import model_sampling_defaults
from ..tokenizer import ChatTemplate, TokenizerError, make_chat_template
from .completions import Completions
from .engine_client import EngineClient
from .errors import APIError
from .metrics import ServerMetrics


@dataclass
class ServerState:
    model_name: str
    api_key: str | None = None
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    engine_loop: EngineLoop | None = None
    completions: Completions | None = None
    load_error: str | None = None
    tool_call_parser: str | None = None  # None: chosen from the chat template
    reasoning_parser: str | None = None  # None: on when the chat template uses think tags
    use_model_defaults: bool = True  # requests fall back to the model's recommended sampling settings
    sampling_flags: dict = field(default_factory=dict)  # `pocket serve`'s sampling flags: over the model's
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def is_ready(self) -> bool:
        return self.engine_loop is not None and self.engine_loop.is_alive

    def attach(self, engine_loop: EngineLoop, chat_template: ChatTemplate | None = None) -> None:
        """Serve with this (started) engine loop; until then /health answers 503. Its steps go to /metrics."""
        engine = engine_loop.engine
        engine_loop.add_step_observer(self.metrics.observe_step)
        if chat_template is None:
            chat_template = default_chat_template(engine)
        defaults = model_sampling_defaults(engine.model_file.metadata) if self.use_model_defaults else {}
        defaults.update(self.sampling_flags)
        self.completions = Completions(EngineClient(engine_loop), self.model_name, chat_template, self.metrics,
                                       self.tool_call_parser, self.reasoning_parser, defaults)
        self.engine_loop = engine_loop


def default_chat_template(engine) -> ChatTemplate | None:
    try:
        return make_chat_template(engine.model_file.metadata, engine.hparams.arch)
    except TokenizerError:
        return None  # no template: /v1/chat/completions answers 400, /v1/completions works


def require_ready(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    if not state.is_ready:
        raise APIError(503, "the model is still loading" if state.load_error is None else
                       f"the model failed to load: {state.load_error}", code="model_not_ready")
    return state


def require_api_key(request: Request) -> None:
    expected = request.app.state.server.api_key
    if not expected:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise APIError(401, "Incorrect or missing API key (send 'Authorization: Bearer KEY')",
                       code="invalid_api_key")
