"""Chat and text completions: API body -> prompt token ids + per-choice SamplingParams -> engine -> OpenAI JSON
(one response, or SSE chunks). Input problems are raised as APIError before anything reaches the engine."""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, StreamingResponse

from ..engine.llm_engine import PromptTooLongError
from ..engine.model_runner import NaNLogitsError
from ..engine.outputs import GenerationChunk, TokenLogprob
from ..engine.structured_output import GrammarError
from ..tokenizer import ChatTemplate, TokenizerError
from .chat_output import ChatDeltaStream, ChatOutputPlan
from .engine_client import ClientDisconnected, EngineClient
from .errors import APIError, bad_request
from .guided import make_tool_plan, structured_output_of
from .metrics import ChoiceTimer, ServerMetrics
from .protocol import ChatCompletionRequest, ChatMessage, CompletionRequest, SamplingFields, make_sampling_params
from .reasoning import REASONING_PARSERS, prompt_opens_reasoning, uses_think_tags
from .sse import SSE_DONE, SSE_HEADERS, SSE_MEDIA_TYPE, sse_event
from .tool_parsers import make_tool_parser, parser_name_for_template
from .tool_prompt import render_chat

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
    output_plan: ChatOutputPlan | None = None  # chat: how replies split into reasoning, content, tool calls
    structured_output: object | None = None  # StructuredOutputParams every choice follows
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.perf_counter)


class Completions:
    def __init__(self, client: EngineClient, model_name: str, chat_template: ChatTemplate | None,
                 metrics: ServerMetrics, tool_call_parser: str | None = None, reasoning_parser: str | None = None,
                 sampling_defaults: dict | None = None):
        self.client = client
        self.engine = client.engine
        self.sampling_defaults = sampling_defaults or {}  # the model's recommended settings (sampling_defaults.py)
        self.tokenizer = client.engine.tokenizer
        self.model_name = model_name
        self.chat_template = chat_template
        self.metrics = metrics
        source = chat_template.source if chat_template else ""
        self.tool_call_parser = tool_call_parser or parser_name_for_template(
            source, chat_template.name if chat_template else "file")
        make_tool_parser(self.tool_call_parser)  # unknown names fail at startup
        if reasoning_parser is not None and reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"unknown reasoning parser {reasoning_parser!r} (known: {', '.join(REASONING_PARSERS)})")
        self.reasoning = reasoning_parser is not None or uses_think_tags(source)

    # ---- body -> prompt and params

    def check_model(self, name: str | None) -> None:
        if name and name != self.model_name:
            raise APIError(404, f"The model '{name}' does not exist (this server runs '{self.model_name}')",
                           "model", "model_not_found")

    def render_messages(self, messages: list[ChatMessage], tools: list[dict] | None = None) -> str:
        if self.chat_template is None:
            raise bad_request("this model has no chat template: use /v1/completions", "messages")
        try:
            return render_chat(self.chat_template, [m.model_dump(exclude_none=True) for m in messages], tools)
        except TokenizerError as exc:
            raise bad_request(str(exc), "messages") from None

    def encode_messages(self, messages: list[ChatMessage], tools: list[dict] | None = None) -> list[int]:
        return self.encode_chat_text(self.render_messages(messages, tools))

    def encode_chat_text(self, text: str) -> list[int]:
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
        output_plan, structured_output = None, None if is_chat else structured_output_of(body)
        if is_chat:
            tool_plan = make_tool_plan(body)
            structured_output = structured_output_of(body, tool_plan)
            prompt_text = self.render_messages(body.messages, tool_plan.tools)
            prompt_ids = self.encode_chat_text(prompt_text)
            parser = tool_plan.parser or (make_tool_parser(self.tool_call_parser) if tool_plan.tools else None)
            output_plan = ChatOutputPlan(parser, self.reasoning,
                                         self.reasoning and prompt_opens_reasoning(prompt_text))
        else:
            prompt_ids = self.encode_prompt(body.prompt)
        max_model_len = self.engine.max_model_len
        if not prompt_ids:
            raise bad_request("the prompt is empty", "messages" if is_chat else "prompt")
        if len(prompt_ids) >= max_model_len:
            raise bad_request(f"This model's maximum context length is {max_model_len} tokens, but the prompt has "
                              f"{len(prompt_ids)} tokens (no room to generate). Shorten the prompt.",
                              "messages" if is_chat else "prompt", "context_length_exceeded")
        # generation ends with finish_reason "length" where the context is full
        requested = (body.requested_max_tokens if body.sets_max_tokens
                     else self.sampling_defaults.get("max_tokens", body.requested_max_tokens))  # serve -n
        max_tokens = requested or (max_model_len - len(prompt_ids))
        logit_bias = self._logit_bias(body.logit_bias)
        try:
            params = [make_sampling_params(body, i, max_tokens, logit_bias, body.num_logprobs, structured_output,
                                           self.sampling_defaults) for i in range(body.n)]
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        request_id = ("chatcmpl-" if is_chat else "cmpl-") + uuid.uuid4().hex[:24]
        return PreparedRequest(prompt_ids, params, is_chat, body, request_id, output_plan=output_plan,
                               structured_output=structured_output)

    @staticmethod
    def _check_unsupported(body, is_chat: bool) -> None:
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
        if prepared.structured_output is not None:  # compile off the event loop (the first builds llguidance's vocab)
            try:
                await asyncio.to_thread(self.engine.structured_output.compile, prepared.structured_output)
            except GrammarError as exc:
                raise bad_request(str(exc), None, "invalid_grammar") from None
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
        except NaNLogitsError as exc:  # the model's fault, not the request's
            raise APIError(500, str(exc), code="nan_logits") from None
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
            message, calls_tools = prepared.output_plan.finalize(text)
            finish_reason = "tool_calls" if calls_tools and choice.finish_reason == "stop" else choice.finish_reason
            return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": choice.finish_reason}

    async def _stream(self, prepared: PreparedRequest) -> AsyncIterator[str]:
        """SSE events; leaving early (the client disconnected) aborts the request in `EngineClient.stream`."""
        body = prepared.body
        choices = [ChoiceState() for _ in prepared.params_per_choice]
        usage_field = {"usage": None} if body.include_usage_in_stream else {}
        delta_streams = [prepared.output_plan.make_stream() for _ in choices] if prepared.is_chat else []
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
                if prepared.is_chat:
                    for event in self._chat_events(prepared, index, delta_streams[index], chunk, logprobs,
                                                   usage_field):
                        yield event
                else:
                    yield self._chunk_event(prepared, index, chunk.text, logprobs, chunk.finish_reason, usage_field)
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

    def _chat_events(self, prepared, index: int, stream: ChatDeltaStream, chunk: GenerationChunk, logprobs,
                     usage_field):
        """One event per delta (reasoning, content, tool-call parts); logprobs ride on the first, the finish
        reason on the last."""
        deltas = stream.feed(chunk.text)
        finish_reason = chunk.finish_reason
        if finish_reason:
            deltas += stream.finish()
            if stream.has_tool_calls and finish_reason == "stop":
                finish_reason = "tool_calls"
        if not deltas and (logprobs or finish_reason):
            deltas = [{}]
        for i, delta in enumerate(deltas):
            is_last = i == len(deltas) - 1
            yield self._chunk_event(prepared, index, delta, logprobs if i == 0 else None,
                                    finish_reason if is_last else None, usage_field)

    def _chunk_event(self, prepared, index, delta, logprobs, finish_reason, usage_field) -> str:
        key = "delta" if prepared.is_chat else "text"
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
