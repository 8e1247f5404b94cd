"""The chat screen's way to the engine. The session's EngineLoop owns the engine (its one thread loads models,
encodes prompts and steps replies); this client starts those jobs from the UI thread without waiting and reports
back to the screen through messages. A reply streams into an async worker on the app's event loop (the engine
thread puts each chunk there), so the app adds no thread of its own."""
from __future__ import annotations

import time
from concurrent.futures import Future

from textual.message_pump import MessagePump

from pocketcli.chat.session import ChatSession
from pocketcli.compile_progress import CompileProgress, CompileWatch

from .messages import KernelsCompiling, ModelFailed, ModelLoaded, ModelLoading, ReplyChunk, ReplyFailed, ReplyFinished

CHUNK_INTERVAL_S = 0.03  # coalesce tokens so a fast model does not flood the UI with messages


class EngineClient:
    def __init__(self, session: ChatSession):
        self.session = session
        self.stop_reply = False  # the flags are set and read on the UI thread only
        self.closed = False
        self.target: MessagePump | None = None  # the chat screen: it runs the reply workers
        self.compile_watch: CompileWatch | None = None

    # --- called from the UI thread -----------------------------------------------------------------------
    def open(self) -> None:
        """Report kernel compiles (a cold cache: the first load and reply) until close()."""
        self.compile_watch = CompileWatch(self._post_compile_progress).__enter__()
        self.session.on_compile_progress = self._post_compile_progress  # a first run's children (AppFirstRun)

    def load_model(self, model: str | None = None) -> None:
        label = model or self.session.model_label
        self._post(ModelLoading(label))
        self.session.start_loading(model).add_done_callback(lambda loaded: self._loaded(loaded, label))

    def generate(self) -> None:
        self.stop_reply = False
        self.target.run_worker(self._stream_reply(), name="chat-reply", group="reply")

    def stop(self) -> None:
        self.stop_reply = True

    def close(self) -> None:
        if self.closed:
            return
        self.stop_reply = self.closed = True
        self.session.close()
        if self.compile_watch is not None:
            self.compile_watch.__exit__(None, None, None)

    # --- other threads (the engine's, the compile watch's) and the reply worker ------------------------------
    def _post(self, message) -> None:
        if self.target is not None:
            self.target.post_message(message)

    def _post_compile_progress(self, progress: CompileProgress) -> None:  # on the compile watch's thread
        self._post(KernelsCompiling(progress))

    def _loaded(self, loaded: Future, label: str) -> None:
        if loaded.exception() is not None:  # shown as a toast; the previous model (if any) stays
            self._post(ModelFailed(f"cannot load {label}: {loaded.exception()}"))
        else:
            self._post(ModelLoaded(self.session.model_label))

    async def _stream_reply(self) -> None:
        pending, last_post = [], time.perf_counter()
        try:
            async for text in self.session.astream_reply(should_stop=lambda: self.stop_reply or self.closed):
                pending.append(text)
                if time.perf_counter() - last_post >= CHUNK_INTERVAL_S:
                    self._post(ReplyChunk("".join(pending)))
                    pending, last_post = [], time.perf_counter()
        except Exception as exc:  # a failed reply is a toast, never a crash
            self._post(ReplyFailed(str(exc) or type(exc).__name__))
            return
        if pending:
            self._post(ReplyChunk("".join(pending)))
        self._post(ReplyFinished(self.session.last_stats))
