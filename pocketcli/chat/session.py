"""One chat: a model, settings that apply to the next turn, the current conversation and its store.
The engine lives in an EngineLoop (its own thread owns it and is the only one to read it: the prompt of a reply is
encoded there too); one thread at a time may call into a session."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..flag_spec import with_default
from ..sampling_params import SamplingParams
from .conversation import Conversation, Turn
from .store import ConversationStore


@dataclass
class ChatSettings(SamplingParams):
    """The sampling settings of the next replies (every SamplingParams field, with its default) and the system
    prompt. A chat reply is capped lower than a generation."""
    max_tokens: int = with_default(SamplingParams, "max_tokens", 512)
    system: str = ""

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(**{f.name: getattr(self, f.name) for f in fields(SamplingParams)})

    def updated(self, **changes) -> ChatSettings:
        return replace(self, **changes)


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


@dataclass
class PendingReply:
    """One reply while it streams: the user turn it answers, its engine request, its text so far and its stats."""
    leaf: Turn
    request: object  # engine_loop.Request
    stats: ReplyStats
    started: float = field(default_factory=time.perf_counter)
    pieces: list[str] = field(default_factory=list)
    finish_reason: str = "aborted"  # until the engine says otherwise

    def add(self, chunk) -> str:
        """Takes one GenerationChunk; returns its text."""
        self.stats.completion_tokens += len(chunk.token_ids)
        self.pieces.append(chunk.text)
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
            if chunk.stats:
                self.stats.decode_tokens_per_second = chunk.stats.decode_tokens_per_second
                self.stats.spec_acceptance = chunk.stats.draft_acceptance
        return chunk.text

    def close(self) -> ReplyStats:
        if self.finish_reason == "aborted" and self.stats.completion_tokens > 1:
            elapsed_s = max(time.perf_counter() - self.started, 1e-9)
            self.stats.decode_tokens_per_second = self.stats.completion_tokens / elapsed_s
        self.stats.finish_reason = self.finish_reason
        return self.stats


@dataclass
class ChatSession:
    model: str | None = None  # registry name or path; None = the registry's chat default
    settings: ChatSettings = field(default_factory=ChatSettings)
    store: ConversationStore = field(default_factory=ConversationStore)
    engine_options: dict = field(default_factory=dict)  # EngineConfig keywords but model_path
    autosave: bool = True
    loop: object = None  # the EngineLoop owning the engine, made at the first load
    loading: Future | None = None  # the load under way, if any
    conversation: Conversation = field(default_factory=Conversation)
    last_stats: ReplyStats | None = None
    context_used: int = 0
    chat_template: object = None  # the loaded engine's ChatTemplate, compiled once at load
    # a cold kernel cache's first run, before a load (commands/chat.py: AppFirstRun): called on the engine thread
    # with the model and on_compile_progress; cancel() on close
    first_run: object = None
    on_compile_progress: Callable | None = None  # CompileProgress -> None (the chat app's status bar)

    def __post_init__(self):
        self.conversation.system = self.conversation.system or self.settings.system

    # --- the model -------------------------------------------------------------------------------------
    @property
    def engine(self):
        return self.loop.engine if self.loop is not None else None

    def load_model(self, model: str | None = None) -> None:
        """Loads `model` (default: the session's) and waits; raises what kept it from loading."""
        self.start_loading(model).result()

    def start_loading(self, model: str | None = None) -> Future:
        """Queues the load on the engine thread and returns at once; the future holds the engine or the error
        (the previous model then stays). Replies asked for after this wait for it."""
        from ..engine.engine_loop import EngineLoop

        if self.loop is None:  # made here: it takes this thread's numba thread count (--threads)
            self.loop = EngineLoop(log_step_errors=False).start()  # a failed reply shows as one line
        model = self.model if model is None else model
        self.loading = self.loop.load(lambda: self._make_engine(model))
        return self.loading

    def _make_engine(self, model: str | None):
        if self.first_run is not None:  # before the engine's imports: numba and the kernels load after it
            self.first_run(model, self.on_compile_progress or (lambda progress: None))
        from ..config import EngineConfig
        from ..engine.warm_up import CHAT_WARM_UP_TOKENS, warm_up
        from ..engine_factory import make_engine
        from ..registry import resolve_model

        engine = make_engine(EngineConfig(model_path=resolve_model(model, for_chat=True), **self.engine_options))
        warm_up(engine, CHAT_WARM_UP_TOKENS)  # in the load's spinner: kernels load (or compile) now, not after Enter
        self.chat_template = chat_template_or_none(engine)  # jinja2's import and compile: 0.16 s, once, not per turn
        self.model, self.context_used = model, 0
        return engine

    def _ensure_loading(self) -> None:
        """A load is queued or an engine is in place; else (the first reply, or failed loads only) load now."""
        if self.loop is None or (self.engine is None and self.loading.done()):
            self.start_loading()

    def close(self) -> None:
        """Stops the engine thread (it ends its step first); the session cannot reply after this."""
        if self.first_run is not None:
            self.first_run.cancel()  # a first run's child at work is killed: the load then fails at once
        if self.loop is not None:
            self.loop.stop(timeout=0)

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
        from ..config import EngineConfig

        return self.engine.config.backend if self.engine else self.engine_options.get("backend", EngineConfig.backend)

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
        """Yields the reply's text as it is decoded (chat --plain waits on it); the reply (partial if stopped) is
        stored and saved when the stream ends, is stopped, or is closed by the caller."""
        reply = self.start_reply().result()
        chunks = self.loop.stream(reply.request)
        try:
            for chunk in chunks:
                if text := reply.add(chunk):
                    yield text
                if should_stop():
                    break
        finally:
            chunks.close()  # aborts the request if we stopped early
            self._end_reply(reply)

    async def astream_reply(self, should_stop: Callable[[], bool] = lambda: False) -> AsyncIterator[str]:
        """stream_reply for the chat app, awaited on its event loop: no thread of its own waits for the engine."""
        import asyncio  # here: every command's flags import this module (ChatSettings), only the app awaits

        reply = await asyncio.wrap_future(self.start_reply())
        chunks = self.loop.astream(reply.request)
        try:
            async for chunk in chunks:
                if text := reply.add(chunk):
                    yield text
                if should_stop():
                    break
        finally:
            await chunks.aclose()  # aborts the request if we stopped early (returns at once)
            self._end_reply(reply)

    def start_reply(self) -> Future:
        """Queues the reply's prompt on the engine thread (after a load under way) and returns at once; the future
        holds the PendingReply to stream, or what kept it from starting."""
        self._ensure_loading()
        leaf = self.conversation.path()[-1] if self.conversation.leaf_id else None
        if leaf is None or leaf.role != "user":
            raise ValueError("the last turn is not a user turn: nothing to reply to")
        messages, params = self.conversation.messages(), self.settings.sampling_params()
        return self.loop.call(lambda: self._prepare_reply(leaf, messages, params))

    def _prepare_reply(self, leaf: Turn, messages: list[dict], params: SamplingParams) -> PendingReply:
        """On the engine thread: the prompt ids (the oldest turns dropped while it does not fit)."""
        from ..engine.engine_loop import Request

        if self.engine is None:  # the loads queued before this all failed
            raise self.loading.exception() or RuntimeError("no model is loaded")
        num_messages = len(messages)
        prompt_ids = self._encode(messages)
        stats = ReplyStats(prompt_tokens=len(prompt_ids), dropped_turns=num_messages - len(messages))
        return PendingReply(leaf, Request(prompt_ids, params), stats)

    def _end_reply(self, reply: PendingReply) -> None:
        self.last_stats = reply.close()
        self.context_used = self.last_stats.prompt_tokens + self.last_stats.completion_tokens
        self.conversation.add("assistant", "".join(reply.pieces), parent_id=reply.leaf.id,
                              finish_reason=reply.finish_reason)
        self._autosave()

    def reply(self, text: str) -> str:
        self.send(text)
        return "".join(self.stream_reply())

    # --- helpers ---------------------------------------------------------------------------------------
    def _encode(self, messages: list[dict]) -> list[int]:
        """Prompt ids for `messages`, dropping the oldest turns while the prompt leaves no room to reply."""
        while True:
            ids = encode_messages(self.engine, messages, self.chat_template)
            first = 1 if messages[0]["role"] == "system" else 0
            if len(ids) < self.engine.max_model_len - 1 or len(messages) - first <= 1:
                return ids
            del messages[first:first + 2 if len(messages) - first > 2 else first + 1]

    def _autosave(self) -> None:
        if self.autosave:
            self.save()


def encode_messages(engine, messages: list[dict], template=None) -> list[int]:
    """Prompt ids for `messages` through `template` (default: the engine's chat template, compiled now)."""
    tokenizer = engine.tokenizer
    template = template or engine_chat_template(engine)
    text = template.render(messages, add_generation_prompt=True)
    # templates usually write BOS themselves; never add a second one
    bos_text = tokenizer.decode([tokenizer.bos_id], skip_special=False) if tokenizer.bos_id is not None else None
    return tokenizer.encode(text, add_special=not (bos_text and text.startswith(bos_text)), parse_special=True)


def engine_chat_template(engine):
    from ..tokenizer import make_chat_template

    return make_chat_template(engine.model_file.metadata, engine.hparams.arch)


def chat_template_or_none(engine):
    """The engine's chat template; None where it has none (encode_messages then raises that error per turn)."""
    from ..tokenizer import TokenizerError

    try:
        return engine_chat_template(engine)
    except TokenizerError:
        return None


def slug(title: str) -> str:
    cleaned = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")
    return "-".join(filter(None, cleaned.split("-")))[:40] or "conversation"
