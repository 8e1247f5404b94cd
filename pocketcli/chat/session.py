"""One chat: a model, settings that apply to the next turn, the current conversation and its store.
Only one thread may call into a session (it owns the engine)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..sampling_params import SamplingParams
from .conversation import Conversation, Turn
from .store import ConversationStore


@dataclass
class ChatSettings:
    system: str = ""
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    max_tokens: int = 512
    seed: int | None = None
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64

    def __post_init__(self):
        self.sampling_params()  # validates

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
                              repeat_penalty=self.repeat_penalty, repeat_last_n=self.repeat_last_n,
                              max_tokens=self.max_tokens, seed=self.seed)

    def updated(self, **changes) -> ChatSettings:
        return replace(self, **changes)


@dataclass
class EngineOptions:
    ctx_size: int = 4096
    batch_size: int = 512
    backend: str = "cpu"
    kv_type: str = "f16"
    spec: tuple = ()  # speculative-decoding EngineConfig keywords as (name, value) pairs (commands.common)
    parallel: tuple = ()  # tensor-parallel EngineConfig keywords (tp_size, devices) as (name, value) pairs


@dataclass
class ReplyStats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    decode_tokens_per_second: float = 0.0
    finish_reason: str | None = None
    dropped_turns: int = 0  # oldest turns left out of the prompt so it fits the context
    spec_acceptance: float | None = None  # accepted / drafted tokens of this reply; None without speculation

    @property
    def context_note(self) -> str:
        if not self.dropped_turns:
            return ""
        return f"context full: the oldest {self.dropped_turns} message(s) were left out of this reply's prompt"


def make_engine(model_path: str, options: EngineOptions):
    from ..config import EngineConfig
    from ..engine.llm_engine import LLMEngine
    from ..parallel import make_rank_group

    return LLMEngine(EngineConfig(model_path=model_path, ctx_size=options.ctx_size,
                                  max_num_batched_tokens=options.batch_size, backend=options.backend,
                                  kv_type=options.kv_type,
                                  **dict(options.spec), **dict(options.parallel)), rank_group_factory=make_rank_group)


@dataclass
class ChatSession:
    model: str | None = None  # registry name or path; None = the registry's chat default
    settings: ChatSettings = field(default_factory=ChatSettings)
    store: ConversationStore = field(default_factory=ConversationStore)
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    autosave: bool = True
    engine: object = None
    conversation: Conversation = field(default_factory=Conversation)
    last_stats: ReplyStats | None = None
    context_used: int = 0

    def __post_init__(self):
        self.conversation.system = self.conversation.system or self.settings.system

    # --- the model -------------------------------------------------------------------------------------
    def load_model(self, model: str | None = None) -> None:
        from ..registry import resolve_model

        model = self.model if model is None else model
        previous, self.engine = self.engine, make_engine(resolve_model(model, for_chat=True), self.engine_options)
        if hasattr(previous, "close"):
            previous.close()  # a tensor-parallel engine's rank processes stop now, not at garbage collection
        self.model = model
        self.context_used = 0

    @property
    def model_label(self) -> str:
        if self.model:
            return Path(self.model).name if self.model.endswith(".gguf") else self.model
        from ..registry import load_registry

        try:
            return load_registry().default_name(for_chat=True) or "default"
        except Exception:  # the label must never fail
            return "default"

    @property
    def device(self) -> str:
        return self.engine.config.backend if self.engine else self.engine_options.backend

    @property
    def context_size(self) -> int:
        return self.engine.max_model_len if self.engine else 0

    # --- conversations ---------------------------------------------------------------------------------
    def new_conversation(self) -> Conversation:
        self.conversation = Conversation(system=self.settings.system, model=self.model_label)
        self.context_used = 0
        return self.conversation

    def open(self, key: str) -> Conversation:
        self.conversation = self.store.find(key)
        self.context_used = 0
        return self.conversation

    def delete_conversation(self) -> None:
        self.store.delete(self.conversation.id)
        self.new_conversation()

    def set_system(self, text: str) -> None:
        self.settings = self.settings.updated(system=text)
        self.conversation.system = text
        self.save()

    def save(self, title: str | None = None) -> Path | None:
        if title:
            self.conversation.title = title
        if not self.conversation.turns and not title:
            return None  # empty chats are not worth a file
        return self.store.save(self.conversation)

    def export_markdown(self, path: str | None = None) -> Path:
        target = Path(path).expanduser() if path else Path.cwd() / f"{slug(self.conversation.title)}.md"
        target.write_text(self.conversation.to_markdown(), encoding="utf-8")
        return target

    # --- turns -----------------------------------------------------------------------------------------
    def send(self, text: str) -> Turn:
        turn = self.conversation.add("user", text)
        self.conversation.model = self.model_label
        self._autosave()
        return turn

    def edit(self, turn_id: str, text: str) -> Turn:
        """A new user turn beside `turn_id`: the old branch stays and can be switched back to."""
        turn = self.conversation.add("user", text, parent_id=self.conversation.turns[turn_id].parent_id)
        self._autosave()
        return turn

    def prepare_regenerate(self) -> Turn:
        """Step back to the user turn the last reply answered; the next reply becomes a sibling branch."""
        path = self.conversation.path()
        while path and path[-1].role != "user":
            path.pop()
        if not path:
            raise ValueError("nothing to regenerate: the conversation has no user turn")
        self.conversation.select(path[-1].id)
        return path[-1]

    def switch_branch(self, turn_id: str, offset: int) -> Turn:
        turn = self.conversation.switch_branch(turn_id, offset)
        self._autosave()
        return turn

    def stream_reply(self, should_stop: Callable[[], bool] = lambda: False) -> Iterator[str]:
        """Yields the reply's text as it is decoded; the reply (partial if stopped) is stored and saved
        when the stream ends, is stopped, or is closed by the caller."""
        from ..engine.generation import stream_generate

        if self.engine is None:
            self.load_model()
        leaf = self.conversation.path()[-1] if self.conversation.leaf_id else None
        if leaf is None or leaf.role != "user":
            raise ValueError("the last turn is not a user turn: nothing to reply to")
        messages = self.conversation.messages()
        num_messages = len(messages)
        prompt_ids = self._encode(messages)
        params = self.settings.sampling_params()
        pieces, finish_reason = [], "aborted"
        stats = ReplyStats(prompt_tokens=len(prompt_ids), dropped_turns=num_messages - len(messages))
        started, spec_before = time.perf_counter(), spec_counts(self.engine)
        chunks = stream_generate(self.engine, prompt_ids, params)
        try:
            for chunk in chunks:
                stats.completion_tokens += len(chunk.token_ids)
                pieces.append(chunk.text)
                if chunk.finish_reason:
                    finish_reason = chunk.finish_reason
                    if chunk.stats:
                        stats.decode_tokens_per_second = chunk.stats.decode_tokens_per_second
                if chunk.text:
                    yield chunk.text
                if should_stop():
                    break
        finally:
            chunks.close()  # aborts the engine sequence if we stopped early
            if finish_reason == "aborted" and stats.completion_tokens > 1:
                stats.decode_tokens_per_second = stats.completion_tokens / max(time.perf_counter() - started, 1e-9)
            stats.finish_reason = finish_reason
            stats.spec_acceptance = spec_acceptance(spec_before, spec_counts(self.engine))
            self.last_stats = stats
            self.context_used = stats.prompt_tokens + stats.completion_tokens
            self.conversation.add("assistant", "".join(pieces), parent_id=leaf.id, finish_reason=finish_reason)
            self._autosave()

    def reply(self, text: str) -> str:
        self.send(text)
        return "".join(self.stream_reply())

    # --- helpers ---------------------------------------------------------------------------------------
    def _encode(self, messages: list[dict]) -> list[int]:
        """Prompt ids for `messages`, dropping the oldest turns while the prompt leaves no room to reply."""
        while True:
            ids = encode_messages(self.engine, messages)
            first = 1 if messages[0]["role"] == "system" else 0
            if len(ids) < self.engine.max_model_len - 1 or len(messages) - first <= 1:
                return ids
            del messages[first:first + 2 if len(messages) - first > 2 else first + 1]

    def _autosave(self) -> None:
        if self.autosave:
            self.save()


def encode_messages(engine, messages: list[dict]) -> list[int]:
    from ..tokenizer import make_chat_template

    tokenizer = engine.tokenizer
    template = make_chat_template(engine.model_file.metadata, engine.hparams.arch)
    text = template.render(messages, add_generation_prompt=True)
    # templates usually write BOS themselves; never add a second one
    bos_text = tokenizer.decode([tokenizer.bos_id], skip_special=False) if tokenizer.bos_id is not None else None
    return tokenizer.encode(text, add_special=not (bos_text and text.startswith(bos_text)), parse_special=True)


def spec_counts(engine) -> tuple[int, int] | None:
    """(drafted, accepted) tokens of the engine's speculative decoder so far; None when it has none."""
    stats = getattr(getattr(engine, "speculative", None), "stats", None)
    return None if stats is None else (stats.num_draft_tokens, stats.num_accepted_tokens)


def spec_acceptance(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def slug(title: str) -> str:
    cleaned = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")
    return "-".join(filter(None, cleaned.split("-")))[:40] or "conversation"
