"""OpenAI request bodies (pydantic): field types and ranges are checked here, before the engine sees anything."""
from __future__ import annotations

from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..flag_spec import api_default, api_defaults, api_fields
from ..sampling_defaults import resolve_sampling
from ..sampling_params import MAX_LOGPROBS, SamplingParams, StructuredOutputParams

MAX_N = 16
MAX_STOP_STRINGS = 16
REQUEST_FIELDS = api_fields(SamplingParams)  # request field -> SamplingParams field (repetition_penalty -> ...)


def _default(field: str):
    """The API's default of a SamplingParams field: written there once (pocketcli/flag_spec.py)."""
    return api_default(SamplingParams, field)




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


class DeclaredSamplingFields(BaseModel):
    """What chat and text completions share. Unknown fields are ignored, as the OpenAI API does. A sampling field
    written here has the API's range; SamplingFields adds the rest of SamplingParams' request fields."""
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(_default("temperature"), ge=0.0, le=2.0)
    top_p: float = Field(_default("top_p"), gt=0.0, le=1.0)
    top_k: int = Field(_default("top_k"), ge=-1)  # 0 or -1: disabled
    min_p: float = Field(_default("min_p"), ge=0.0, le=1.0)
    presence_penalty: float = Field(_default("presence_penalty"), ge=-2.0, le=2.0)
    frequency_penalty: float = Field(_default("frequency_penalty"), ge=-2.0, le=2.0)
    repetition_penalty: float = Field(_default("repeat_penalty"), gt=0.0, le=10.0)
    stop: str | list[str] | None = None  # None: not sent (SamplingParams: no stop strings)
    seed: int | None = _default("seed")
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool = _default("ignore_eos")
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
        return stop_strings(self.stop)

    @property
    def sets_max_tokens(self) -> bool:
        return bool({"max_tokens", "max_completion_tokens"} & self.model_fields_set)


def generated_request_fields(declared: type[BaseModel]) -> dict[str, tuple]:
    """A request field for each request field of SamplingParams that `declared` does not write out: its type and
    API default from the dataclass, its range checked by SamplingParams (a 400 naming the field)."""
    types = get_type_hints(SamplingParams)
    return {name: (types[field], _default(field)) for name, field in REQUEST_FIELDS.items()
            if name not in declared.model_fields}


SamplingFields = create_model("SamplingFields", __base__=DeclaredSamplingFields,
                              **generated_request_fields(DeclaredSamplingFields))


def stop_strings(stop: str | list[str] | None) -> list[str]:
    stop = [stop] if isinstance(stop, str) else list(stop or [])
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


def make_sampling_params(body: SamplingFields, index: int, max_tokens: int, logit_bias: dict[int, float],
                         num_logprobs: int | None, structured_output: StructuredOutputParams | None = None,
                         model_defaults: dict | None = None) -> SamplingParams:
    """Engine settings for choice `index`; with a seed, choice i uses seed + i so n choices differ. A sampling
    field the request leaves out takes the server's default (model_defaults: `pocket serve`'s sampling flags over
    the model's recommended settings) before the API's."""
    sent = {field: getattr(body, name) for name, field in REQUEST_FIELDS.items() if name in body.model_fields_set}
    api = {**api_defaults(SamplingParams), **{field: getattr(body, name) for name, field in REQUEST_FIELDS.items()}}
    settings = resolve_sampling(sent, model_defaults or {}, api)
    seed = settings["seed"]
    settings.update(top_k=max(settings["top_k"], 0), stop=stop_strings(settings["stop"]),
                    seed=None if seed is None else seed + index, max_tokens=max_tokens)
    return SamplingParams(**settings, logit_bias=logit_bias, logprobs=num_logprobs,
                          structured_output=structured_output)
