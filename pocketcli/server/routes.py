"""HTTP routes: thin handlers over Completions, the tokenizer and the metrics."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from .errors import APIError, bad_request
from .protocol import ChatCompletionRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest
from .state import ServerState, require_api_key, require_ready

router = APIRouter()
api = APIRouter(dependencies=[Depends(require_api_key)])


def state_of(request: Request) -> ServerState:
    return request.app.state.server


@router.get("/health")
async def health(request: Request):
    state = state_of(request)
    if state.load_error:
        return JSONResponse({"status": "error", "error": state.load_error}, status_code=503)
    if not state.is_ready:
        return JSONResponse({"status": "loading"}, status_code=503)
    return {"status": "ok"}


@router.get("/metrics")
async def metrics(request: Request):
    state = state_of(request)
    stats = state.engine_loop.stats() if state.is_ready else None
    return Response(state.metrics.render(stats), media_type=state.metrics.content_type)


@api.get("/v1/models")
async def list_models(request: Request):
    state = require_ready(request)
    return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": state.created,
                                        "owned_by": "pocketllm",
                                        "max_model_len": state.engine_loop.engine.max_model_len}]}


@api.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    state = require_ready(request)
    state.completions.check_model(model_id)
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "pocketllm"}


@api.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    return await _complete("chat", body, request)


@api.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    return await _complete("completions", body, request)


async def _complete(endpoint: str, body, request: Request):
    state = require_ready(request)
    try:
        response = await state.completions.respond(body, request)
    except APIError as exc:
        state.metrics.requests.labels(endpoint, str(exc.status_code)).inc()
        raise
    state.metrics.requests.labels(endpoint, "200").inc()
    return response


@api.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request):
    state = require_ready(request)
    completions = state.completions
    completions.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise bad_request("give exactly one of 'prompt' or 'messages'", "prompt")
    if body.messages is not None:
        tokens = completions.encode_messages(body.messages)
    else:
        tokens = completions.tokenizer.encode(body.prompt, add_special=body.add_special_tokens, parse_special=True)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": state.engine_loop.engine.max_model_len}


@api.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request):
    state = require_ready(request)
    state.completions.check_model(body.model)
    token_ids = state.completions.encode_prompt(body.tokens)  # checks the ids are in the vocabulary
    return {"prompt": state.completions.tokenizer.decode(token_ids)}
