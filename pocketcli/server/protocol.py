"""OpenAI request bodies (pydantic): field types and ranges are checked here, before the engine sees anything."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..sampling_defaults import resolve_sampling
from ..sampling_params import MAX_LOGPROBS, SamplingParams, StructuredOutputParams

MAX_N = 16
MAX_STOP_STRINGS = 16


class StreamOptions(BaseModel):
    include_usage: bool = False


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None


class FunctionDefinition(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class SamplingFields(BaseModel):
    """What chat and text completions share. Unknown fields are ignored, as the OpenAI API does."""
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # 0 or -1: disabled
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool = False
    user: str | None = None
    # vLLM-style constraints (send with the openai client's extra_body)
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_grammar: str | None = None  # Lark, llguidance dialect
    guided_choice: list[str] | None = Field(None, min_length=1)

    @property
    def include_usage_in_stream(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def stop_strings(self) -> list[str]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stop) > MAX_STOP_STRINGS:
            raise ValueError(f"stop: at most {MAX_STOP_STRINGS} stop strings")
        return stop


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingFields):
    prompt: str | list[int] = Field(min_length=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for text completions

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs


class TokenizeRequest(BaseModel):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(BaseModel):
    model: str | None = None
    tokens: list[int]


# request field -> SamplingParams field, for the settings a model may recommend (pocketcli/sampling_defaults.py)
MODEL_DEFAULT_FIELDS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                        "repetition_penalty": "repeat_penalty"}


def make_sampling_params(body: SamplingFields, index: int, max_tokens: int, logit_bias: dict[int, float],
                         num_logprobs: int | None, structured_output: StructuredOutputParams | None = None,
                         model_defaults: dict | None = None) -> SamplingParams:
    """Engine settings for choice `index`; with a seed, choice i uses seed + i so n choices differ. A sampling
    field the request leaves out takes the model's recommended value (model_defaults) before the API's default."""
    sent = {field: getattr(body, name) for name, field in MODEL_DEFAULT_FIELDS.items() if name in body.model_fields_set}
    api = {field: getattr(body, name) for name, field in MODEL_DEFAULT_FIELDS.items()}
    settings = resolve_sampling(sent, model_defaults or {}, {**api, "repeat_last_n": SamplingParams.repeat_last_n})
    return SamplingParams(
        temperature=settings["temperature"], top_k=max(settings["top_k"], 0), top_p=settings["top_p"],
        min_p=settings["min_p"], repeat_penalty=settings["repeat_penalty"], repeat_last_n=settings["repeat_last_n"],
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, logit_bias=logit_bias, max_tokens=max_tokens,
        seed=None if body.seed is None else body.seed + index, stop=body.stop_strings(),
        ignore_eos=body.ignore_eos, logprobs=num_logprobs, structured_output=structured_output)
