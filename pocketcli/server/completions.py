"""Chat and text completions: API body -> prompt token ids + per-choice SamplingParams -> engine -> OpenAI JSON
(one response, or SSE chunks). Input problems are raised as APIError before anything reaches the engine."""
from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, StreamingResponse

from ..engine.llm_engine import PromptTooLongError
from ..engine.outputs import GenerationChunk, TokenLogprob
from ..tokenizer import ChatTemplate, TokenizerError
from .engine_client import ClientDisconnected, EngineClient
from .errors import APIError, bad_request
from .metrics import ChoiceTimer, ServerMetrics
from .protocol import ChatCompletionRequest, ChatMessage, CompletionRequest, SamplingFields, make_sampling_params
from .sse import SSE_DONE, SSE_HEADERS, SSE_MEDIA_TYPE, sse_event

LOGIT_BIAS_LIMIT = 100.0


@dataclass
class ChoiceState:
    text: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    num_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens the prefix cache supplied
    finish_reason: str | None = None


@dataclass
class PreparedRequest:
    prompt_token_ids: list[int]
    params_per_choice: list
    is_chat: bool
    body: SamplingFields
    request_id: str
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.perf_counter)


class Completions:
    def __init__(self, client: EngineClient, model_name: str, chat_template: ChatTemplate | None,
                 metrics: ServerMetrics):
        self.client = client
        self.engine = client.engine
        self.tokenizer = client.engine.tokenizer
        self.model_name = model_name
        self.chat_template = chat_template
        self.metrics = metrics

    # ---- body -> prompt and params

    def check_model(self, name: str | None) -> None:
        if name and name != self.model_name:
            raise APIError(404, f"The model '{name}' does not exist (this server runs '{self.model_name}')",
                           "model", "model_not_found")

    def encode_messages(self, messages: list[ChatMessage]) -> list[int]:
        if self.chat_template is None:
            raise bad_request("this model has no chat template: use /v1/completions", "messages")
        try:
            text = self.chat_template.render([m.model_dump(exclude_none=True) for m in messages])
        except TokenizerError as exc:
            raise bad_request(str(exc), "messages") from None
        bos_id = self.tokenizer.bos_id
        bos_text = self.tokenizer.decode([bos_id], skip_special=False) if bos_id is not None else ""
        add_special = not (bos_text and text.startswith(bos_text))  # never a second BOS
        return self.tokenizer.encode(text, add_special=add_special, parse_special=True)

    def encode_prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special=True, parse_special=True)
        vocab_size = self.engine.hparams.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise bad_request(f"token id {bad[0]} is outside the vocabulary (size {vocab_size})", "prompt")
        return list(prompt)

    def prepare(self, body: ChatCompletionRequest | CompletionRequest) -> PreparedRequest:
        self.check_model(body.model)
        is_chat = isinstance(body, ChatCompletionRequest)
        self._check_unsupported(body, is_chat)
        prompt_ids = self.encode_messages(body.messages) if is_chat else self.encode_prompt(body.prompt)
        max_model_len = self.engine.max_model_len
        if not prompt_ids:
            raise bad_request("the prompt is empty", "messages" if is_chat else "prompt")
        if len(prompt_ids) >= max_model_len:
            raise bad_request(f"This model's maximum context length is {max_model_len} tokens, but the prompt has "
                              f"{len(prompt_ids)} tokens (no room to generate). Shorten the prompt.",
                              "messages" if is_chat else "prompt", "context_length_exceeded")
        # generation ends with finish_reason "length" where the context is full
        max_tokens = body.requested_max_tokens or (max_model_len - len(prompt_ids))
        logit_bias = self._logit_bias(body.logit_bias)
        try:
            params = [make_sampling_params(body, i, max_tokens, logit_bias, body.num_logprobs)
                      for i in range(body.n)]
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        request_id = ("chatcmpl-" if is_chat else "cmpl-") + uuid.uuid4().hex[:24]
        return PreparedRequest(prompt_ids, params, is_chat, body, request_id)

    @staticmethod
    def _check_unsupported(body, is_chat: bool) -> None:
        if is_chat and body.response_format is not None and body.response_format.type != "text":
            raise bad_request(f"response_format {body.response_format.type!r} is not supported yet",
                              "response_format", "unsupported_parameter")
        if is_chat and body.tools and body.tool_choice != "none":
            raise bad_request("tools are not supported yet", "tools", "unsupported_parameter")
        if not is_chat and body.echo:
            raise bad_request("echo is not supported", "echo", "unsupported_parameter")

    def _logit_bias(self, logit_bias: dict[str, float] | None) -> dict[int, float]:
        out = {}
        for key, bias in (logit_bias or {}).items():
            try:
                token_id = int(key)
            except ValueError:
                raise bad_request(f"logit_bias key {key!r} is not a token id", "logit_bias") from None
            if not 0 <= token_id < self.engine.hparams.vocab_size:
                raise bad_request(f"logit_bias token id {token_id} is outside the vocabulary", "logit_bias")
            if not -LOGIT_BIAS_LIMIT <= bias <= LOGIT_BIAS_LIMIT:
                raise bad_request(f"logit_bias values must be in [-100, 100], got {bias}", "logit_bias")
            out[token_id] = float(bias)
        return out

    # ---- running

    async def respond(self, body, http_request: HTTPRequest):
        prepared = self.prepare(body)
        self.metrics.prompt_tokens.inc(len(prepared.prompt_token_ids))
        if body.stream:
            return StreamingResponse(self._stream(prepared), media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS)
        return JSONResponse(await self._collect(prepared, http_request))

    async def _run(self, prepared: PreparedRequest, is_disconnected=None
                   ) -> AsyncIterator[tuple[int, GenerationChunk]]:
        timers = [ChoiceTimer(self.metrics, prepared.started) for _ in prepared.params_per_choice]
        unfinished = set(range(len(timers)))
        try:
            async for index, chunk in self.client.stream(prepared.prompt_token_ids, prepared.params_per_choice,
                                                         is_disconnected):
                timers[index].on_tokens(len(chunk.token_ids))
                if chunk.finish_reason:
                    timers[index].on_finish(chunk.finish_reason)
                    unfinished.discard(index)
                yield index, chunk
        except PromptTooLongError as exc:
            raise bad_request(str(exc), None, "context_length_exceeded") from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        finally:  # the client left (or an error ended the request): what still ran was aborted
            for index in unfinished:
                timers[index].on_finish("abort")

    async def _collect(self, prepared: PreparedRequest, http_request: HTTPRequest) -> dict:
        choices = [ChoiceState() for _ in prepared.params_per_choice]
        try:
            async for index, chunk in self._run(prepared, http_request.is_disconnected):
                _accumulate(choices[index], chunk)
        except ClientDisconnected:
            return {}
        cached = self._num_cached(choices)
        return {
            "id": prepared.request_id, "object": "chat.completion" if prepared.is_chat else "text_completion",
            "created": prepared.created, "model": self.model_name,
            "choices": [self._final_choice(prepared, i, c) for i, c in enumerate(choices)],
            "usage": self._usage(prepared, sum(c.num_tokens for c in choices), cached),
        }

    def _final_choice(self, prepared: PreparedRequest, index: int, choice: ChoiceState) -> dict:
        text = "".join(choice.text)
        logprobs = self._format_logprobs(prepared, choice.logprobs)
        if prepared.is_chat:
            return {"index": index, "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs, "finish_reason": choice.finish_reason}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": choice.finish_reason}

    async def _stream(self, prepared: PreparedRequest) -> AsyncIterator[str]:
        """SSE events; leaving early (the client disconnected) aborts the request in `EngineClient.stream`."""
        body = prepared.body
        choices = [ChoiceState() for _ in prepared.params_per_choice]
        usage_field = {"usage": None} if body.include_usage_in_stream else {}
        if prepared.is_chat:
            for index in range(len(choices)):
                yield self._chunk_event(prepared, index, {"role": "assistant", "content": ""}, None, None,
                                        usage_field)
        try:
            async for index, chunk in self._run(prepared):
                _accumulate(choices[index], chunk)
                if not chunk.text and not chunk.finish_reason and not chunk.logprobs:
                    continue
                logprobs = self._format_logprobs(prepared, chunk.logprobs or [])
                delta = {"content": chunk.text} if prepared.is_chat else chunk.text
                yield self._chunk_event(prepared, index, delta, logprobs, chunk.finish_reason, usage_field)
        except APIError as exc:
            yield sse_event(exc.body())
            yield SSE_DONE
            return
        if body.include_usage_in_stream:
            usage = self._usage(prepared, sum(c.num_tokens for c in choices), self._num_cached(choices))
            yield sse_event({**self._envelope(prepared), "choices": [], "usage": usage})
        yield SSE_DONE

    # ---- formatting

    def _envelope(self, prepared: PreparedRequest) -> dict:
        kind = "chat.completion.chunk" if prepared.is_chat else "text_completion"
        return {"id": prepared.request_id, "object": kind, "created": prepared.created, "model": self.model_name}

    def _chunk_event(self, prepared, index, delta, logprobs, finish_reason, usage_field) -> str:
        key = "delta" if prepared.is_chat else "text"
        if prepared.is_chat and finish_reason:
            delta = delta if delta.get("content") else {}
        choice = {"index": index, key: delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return sse_event({**self._envelope(prepared), "choices": [choice], **usage_field})

    @staticmethod
    def _usage(prepared: PreparedRequest, num_completion_tokens: int, num_cached_tokens: int) -> dict:
        num_prompt = len(prepared.prompt_token_ids)
        return {"prompt_tokens": num_prompt, "completion_tokens": num_completion_tokens,
                "total_tokens": num_prompt + num_completion_tokens,
                "prompt_tokens_details": {"cached_tokens": num_cached_tokens}}

    @staticmethod
    def _num_cached(choices: list[ChoiceState]) -> int:
        return max(c.num_cached_tokens for c in choices)

    def _format_logprobs(self, prepared: PreparedRequest, logprobs: list[TokenLogprob]) -> dict | None:
        if prepared.body.num_logprobs is None:
            return None
        if prepared.is_chat:
            return {"content": [self._chat_logprob(lp) for lp in logprobs]}
        tokens = [self._token_text(lp.token_id) for lp in logprobs]
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in logprobs],
                "top_logprobs": [{self._token_text(t): p for t, p in lp.top} for lp in logprobs],
                "text_offset": offsets}

    def _chat_logprob(self, lp: TokenLogprob) -> dict:
        entry = self._token_entry(lp.token_id, lp.logprob)
        entry["top_logprobs"] = [self._token_entry(t, p) for t, p in lp.top]
        return entry

    def _token_entry(self, token_id: int, logprob: float) -> dict:
        piece = self.tokenizer.token_to_piece(token_id, special=True)
        return {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece)}

    def _token_text(self, token_id: int) -> str:
        return self.tokenizer.token_to_piece(token_id, special=True).decode("utf-8", errors="replace")


def _accumulate(choice: ChoiceState, chunk: GenerationChunk) -> None:
    choice.text.append(chunk.text)
    choice.num_tokens += len(chunk.token_ids)
    choice.logprobs.extend(chunk.logprobs or [])
    if chunk.finish_reason:
        choice.finish_reason = chunk.finish_reason
        if chunk.stats is not None:
            choice.num_cached_tokens = chunk.stats.num_cached_tokens
