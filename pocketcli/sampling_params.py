"""Per-request sampling settings, shared by the CLI, models.toml and the server."""
from __future__ import annotations

from dataclasses import dataclass, field

from .flag_spec import setting

MAX_LOGPROBS = 20  # top alternatives a request may ask for (OpenAI's limit)
STRUCTURED_OUTPUT_KINDS = ("json_object", "json_schema", "regex", "grammar")


@dataclass(frozen=True)
class StructuredOutputParams:
    """A grammar the output must follow: kind "json_object" (spec unused), "json_schema" (spec: the schema as
    JSON text), "regex" or "grammar" (Lark text, llguidance dialect)."""
    kind: str
    spec: str = ""

    def __post_init__(self):
        if self.kind not in STRUCTURED_OUTPUT_KINDS:
            raise ValueError(f"structured output kind must be one of {', '.join(STRUCTURED_OUTPUT_KINDS)}, "
                             f"got {self.kind!r}")


@dataclass
class SamplingParams:
    """Each flag field is also a flag of generate, chat and serve and (api_name) an OpenAI request field: its
    default and help are written here once (pocketcli/flag_spec.py)."""
    temperature: float = setting(0.8, "sampling temperature (0 = greedy)", aliases=("--temp",), api_default=1.0)
    top_k: int = setting(40, "sample from the k most likely tokens (0 disables)", api_default=0)
    top_p: float = setting(0.95, "sample from the most likely tokens holding this much probability (1.0 disables)",
                           api_default=1.0)
    min_p: float = setting(0.05, "drop tokens less likely than this times the most likely one (0.0 disables)",
                           api_default=0.0)
    repeat_penalty: float = setting(1.0, "penalise the tokens seen in the last --repeat-last-n (1.0 disables)",
                                    api_name="repetition_penalty")
    repeat_last_n: int = setting(64, "tokens looked back by the repeat penalty (-1: the whole context)",
                                 api_name=None)
    presence_penalty: float = setting(0.0, "subtracted once from every token already generated (OpenAI's)")
    frequency_penalty: float = setting(0.0, "subtracted per occurrence in the generated tokens (OpenAI's)")
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit (requests only)
    max_tokens: int = setting(256, "most tokens to generate", aliases=("-n",), api_name=None,  # completions.py
                              api_default=None)  # the API's: the rest of the context (16 for text completions)
    seed: int | None = setting(None, "random seed (default: a new one each run)")
    stop: list[str] = setting([], "stop string (repeatable)")
    ignore_eos: bool = setting(False, "keep generating past end-of-sequence tokens")
    logprobs: int | None = None  # None: no logprobs; N >= 0: the sampled token's logprob and the top N (requests)
    structured_output: StructuredOutputParams | None = None  # grammar-constrained decoding (llguidance; requests)

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repeat_penalty <= 0:
            raise ValueError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or bool(self.logit_bias))
