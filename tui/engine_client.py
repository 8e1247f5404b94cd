"""The one thread that owns the engine: jobs (load a model, stream a reply) run in order from a queue and
report back to the screen through messages."""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from textual.message_pump import MessagePump

from pocketcli.chat.session import ChatSession
from pocketcli.compile_progress import CompileProgress, CompileWatch

from .messages import KernelsCompiling, ModelFailed, ModelLoaded, ModelLoading, ReplyChunk, ReplyFailed, ReplyFinished

CHUNK_INTERVAL_S = 0.03  # coalesce tokens so a fast model does not flood the UI with messages


class EngineClient:
    def __init__(self, session: ChatSession):
        self.session = session
        self.jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.stop_reply = threading.Event()
        self.closed = threading.Event()
        self.target: MessagePump | None = None

    # --- called from the UI thread -----------------------------------------------------------------------
    def load_model(self, model: str | None = None) -> None:
        self.jobs.put(lambda: self._load_model(model))

    def generate(self) -> None:
        self.stop_reply.clear()
        self.jobs.put(self._generate)

    def stop(self) -> None:
        self.stop_reply.set()

    def close(self) -> None:
        self.stop_reply.set()
        self.closed.set()
        self.jobs.put(None)

    # --- the engine thread -------------------------------------------------------------------------------
    def serve(self, is_cancelled: Callable[[], bool]) -> None:
        with CompileWatch(self._post_compile_progress):  # kernels compile in the first reply (a cold cache)
            while not (self.closed.is_set() or is_cancelled()):
                try:
                    job = self.jobs.get(timeout=0.1)
                except queue.Empty:
                    continue
                if job is None:
                    return
                job()

    def _post(self, message) -> None:
        if self.target is not None:
            self.target.post_message(message)

    def _post_compile_progress(self, progress: CompileProgress) -> None:  # on the compile watch's thread
        self._post(KernelsCompiling(progress))

    def _load_model(self, model: str | None) -> None:
        self._post(ModelLoading(model or self.session.model_label))
        try:
            self.session.load_model(model)
        except Exception as exc:  # shown as a toast; the previous model (if any) stays
            self._post(ModelFailed(f"cannot load {model or self.session.model_label}: {exc}"))
            return
        self._post(ModelLoaded(self.session.model_label))

    def _generate(self) -> None:
        pending, last_post = [], time.perf_counter()
        try:
            for text in self.session.stream_reply(should_stop=lambda: self.stop_reply.is_set()
                                                  or self.closed.is_set()):
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
