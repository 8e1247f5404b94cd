"""One background thread owns the LLMEngine; other threads talk to it only through queues. `pocket serve`,
`pocket chat` (the Textual app and the plain REPL) and `pocket generate` all run their engine in one.

Callers `submit` a Request and get what it produces delivered to a sink (by default a queue.Queue they read):
GenerationChunk objects (text delta, token ids, logprobs; the last one carries finish_reason and stats), an
Exception if the request failed, and then `None`, which always ends the stream. `stream(request)` is the same as
a generator for a caller that waits (generate, chat --plain); `astream(request)` for a caller on an asyncio event
loop (the chat app): the engine thread puts each item on that loop, so no other thread waits or reads the engine.
`abort(request_id)` is safe from any thread: the engine thread frees the request's KV blocks before its next step.
`load(make_engine)` builds an engine on the engine thread and puts it in place of the one before (chat's model
switch); requests queued after it run on the new one. `call(job)` runs any other job there, in order with the rest.
"""
from __future__ import annotations

import itertools
import logging
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..sampling_params import SamplingParams
from .outputs import GenerationChunk
from .request_stream import RequestStream

if TYPE_CHECKING:  # the engine (numba, the kernels) loads with the first model: a chat's first run comes before
    from .llm_engine import LLMEngine

log = logging.getLogger(__name__)

StreamItem = GenerationChunk | Exception | None
Sink = Callable[[StreamItem], None]
# called on the engine thread after each step that gave sequences tokens: (the step's wall seconds, sequences given
# tokens, tokens given); it must not block (the server's /metrics: ServerMetrics.observe_step)
StepObserver = Callable[[float, int, int], None]

_request_counter = itertools.count()


@dataclass
class Request:
    prompt_token_ids: list[int]
    params: SamplingParams
    request_id: str = field(default_factory=lambda: f"req-{next(_request_counter)}")


@dataclass(frozen=True)
class EngineStats:
    """A point-in-time view for /metrics and /health (read without locking: each field is one int read)."""
    num_running: int
    num_waiting: int
    num_blocks_used: int
    num_blocks_free: int
    num_blocks: int
    prefix_cache_hit_rate: float
    num_prefix_query_tokens: int
    num_prefix_hit_tokens: int
    speculative: object = None  # speculative.SpecStats when speculative decoding is on


@dataclass
class _Tracked:
    request: Request
    stream: RequestStream
    sink: Sink


def creator_num_threads() -> int | None:
    """numba's thread count on this thread; None where numba is not loaded yet (nothing set one: its default)."""
    numba = sys.modules.get("numba")
    return numba.get_num_threads() if numba is not None else None


class EngineLoop:
    def __init__(self, engine: LLMEngine | None = None, log_step_errors: bool = True):
        """log_step_errors: log a failed step with its traceback (the server's log); generate and chat show the
        error their request gets as one line instead."""
        self.engine = engine  # None until load() has run
        self.log_step_errors = log_step_errors
        self._step_observers: tuple[StepObserver, ...] = ()  # replaced whole: the engine thread reads it unlocked
        self._inbox: queue.Queue = queue.Queue()
        self._tracked: dict[int, _Tracked] = {}  # seq_id -> request; touched only by the engine thread
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._stopping = False
        # numba's thread count (--threads) is per thread: the engine thread takes its creator's
        self._num_threads = creator_num_threads()

    # ---- any thread

    def start(self) -> "EngineLoop":
        self._thread.start()
        return self

    def add_step_observer(self, observer: StepObserver) -> None:
        """Tell observer each step's time and batch from now on (StepObserver)."""
        self._step_observers = (*self._step_observers, observer)

    def remove_step_observer(self, observer: StepObserver) -> None:
        self._step_observers = tuple(known for known in self._step_observers if known is not observer)

    def submit(self, request: Request, sink: Sink | None = None) -> queue.Queue | None:
        """Queue a request; without a sink, returns the queue.Queue its stream items arrive on. A sink is called
        on the engine thread: it must not block (e.g. `loop.call_soon_threadsafe(asyncio_queue.put_nowait, ...)`)."""
        out = None
        if sink is None:
            out = queue.Queue()
            sink = out.put
        if self._stopping:
            _deliver(sink, RuntimeError("the engine loop has stopped"))
            _deliver(sink, None)
        else:
            self._inbox.put(("submit", request, sink))
        return out

    def stream(self, request: Request) -> Iterator[GenerationChunk]:
        """The request's chunks as they come, for a caller that waits (an engine error is raised here). Closing the
        generator early, or a KeyboardInterrupt while it waits, aborts the request."""
        out, item = self.submit(request), request
        try:
            while (item := out.get()) is not None:
                yield _chunk_or_raise(item)
        finally:
            if item is not None:  # left before the end (aborting a request that failed does nothing)
                self.abort(request.request_id)

    async def astream(self, request: Request) -> AsyncIterator[GenerationChunk]:
        """stream() for a caller on an asyncio event loop: it awaits the chunks, which the engine thread puts on the
        loop (call_soon_threadsafe). Closing it early, or cancelling its task, aborts the request."""
        import asyncio  # here: generate and chat --plain never load asyncio (~25 ms of each start)

        event_loop, items = asyncio.get_running_loop(), asyncio.Queue()
        self.submit(request, lambda stream_item: event_loop.call_soon_threadsafe(items.put_nowait, stream_item))
        item = request
        try:
            while (item := await items.get()) is not None:
                yield _chunk_or_raise(item)
        finally:
            if item is not None:
                self.abort(request.request_id)

    def call(self, job: Callable[[], object]) -> Future:
        """Run job() on the engine thread, between steps and in order with the requests; the future holds what it
        returns or raises."""
        future: Future = Future()
        if self._stopping:
            future.set_exception(RuntimeError("the engine loop has stopped"))
        else:
            self._inbox.put(("call", job, future))
        return future

    def load(self, make_engine: Callable[[], LLMEngine]) -> Future:
        """Build an engine on the engine thread and serve with it from then on; the one before is closed. The
        future holds the new engine, or the error that kept it from loading (the previous one then stays)."""
        return self.call(lambda: self._install(make_engine()))

    def abort(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id, None))

    def stop(self, timeout: float | None = 10.0) -> None:
        self._inbox.put(("stop", None, None))
        if self._thread.is_alive():
            self._thread.join(timeout)

    def stats(self) -> EngineStats:
        scheduler, manager = self.engine.scheduler, self.engine.block_manager
        return EngineStats(len(scheduler.running), len(scheduler.waiting), manager.num_used_blocks,
                           manager.num_free_blocks, manager.num_blocks, manager.prefix_cache_hit_rate,
                           manager.num_prefix_query_tokens, manager.num_prefix_hit_tokens,
                           getattr(self.engine.speculative, "stats", None))

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # ---- the engine thread

    def _run(self) -> None:
        if self._num_threads is not None:
            import numba

            numba.set_num_threads(self._num_threads)
        try:
            while not self._stopping:
                self._drain_inbox(block=not self._has_work())
                if not self._stopping and self._has_work():
                    self._step()
        finally:
            self._stopping = True
            self._fail_all(RuntimeError("the engine loop has stopped"))

    def _has_work(self) -> bool:
        return self.engine is not None and self.engine.has_unfinished()

    def _drain_inbox(self, block: bool) -> None:
        try:
            message = self._inbox.get(block=block)
            while True:
                self._handle(*message)
                message = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _handle(self, kind: str, payload, sink: Sink | None) -> None:
        if kind == "submit":
            self._add(payload, sink)
        elif kind == "abort":
            self._abort(payload)
        elif kind == "call":
            self._call(payload, sink)
        elif kind == "stop":
            self._stopping = True

    def _call(self, job: Callable[[], object], future: Future) -> None:
        try:
            result = job()
        except Exception as exc:  # reported to the caller; the loop goes on
            future.set_exception(exc)
            return
        future.set_result(result)

    def _install(self, engine: LLMEngine) -> LLMEngine:
        self._fail_all(RuntimeError("the model was replaced"))
        previous, self.engine = self.engine, engine
        if hasattr(previous, "close"):
            previous.close()  # a tensor-parallel engine's rank processes stop now, not at garbage collection
        return engine

    def _add(self, request: Request, sink: Sink) -> None:
        try:
            if self.engine is None:
                raise RuntimeError("no model is loaded")
            seq = self.engine.add_request(request.prompt_token_ids, request.params)
        except Exception as exc:  # bad request: the caller gets the error, the loop goes on
            _deliver(sink, exc)
            _deliver(sink, None)
            return
        self._tracked[seq.seq_id] = _Tracked(request, RequestStream(self.engine, seq), sink)

    def _abort(self, request_id: str) -> None:
        for seq_id, tracked in list(self._tracked.items()):
            if tracked.request.request_id == request_id:
                self._end(seq_id, tracked.stream.aborted())

    def _step(self) -> None:
        started = time.perf_counter()
        try:
            outputs = self.engine.step()
        except Exception as exc:  # an engine failure fails the requests in flight, not the server
            if self.log_step_errors:
                log.exception("engine step failed")
            self._fail_all(exc)
            return
        self._observe_step(time.perf_counter() - started, outputs)  # before the chunks: a finished request's
        # client then finds its last step in /metrics
        for output in outputs:
            tracked = self._tracked.get(output.seq_id)
            if tracked is None:
                continue
            chunk = tracked.stream.process(output)
            if chunk.finish_reason:
                self._end(output.seq_id, chunk)
            elif not _deliver(tracked.sink, chunk):
                self._end(output.seq_id, tracked.stream.aborted())

    def _observe_step(self, step_seconds: float, outputs) -> None:
        observers = self._step_observers
        if not observers:  # generate and chat: nothing to count
            return
        num_tokens = sum(len(output.new_token_ids) for output in outputs)
        if not num_tokens:
            return
        num_seqs = sum(1 for output in outputs if output.new_token_ids)
        for observer in observers:
            try:
                observer(step_seconds, num_seqs, num_tokens)
            except Exception:  # an observer's failure must not stop the engine
                log.exception("step observer failed")

    def _end(self, seq_id: int, last_chunk: GenerationChunk) -> None:
        tracked = self._tracked.pop(seq_id)
        seq = tracked.stream.seq
        if not seq.is_finished:
            self.engine.abort(seq)  # frees its blocks now
        _deliver(tracked.sink, last_chunk)
        _deliver(tracked.sink, None)

    def _fail_all(self, exc: Exception) -> None:
        """Every request in flight, and (once stopping) every one still queued, gets `exc` and its end."""
        while self._stopping and not self._inbox.empty():
            kind, payload, sink = self._inbox.get_nowait()
            if kind == "submit":
                _deliver(sink, exc)
                _deliver(sink, None)
            elif kind == "call":
                sink.set_exception(exc)
        for seq_id, tracked in list(self._tracked.items()):
            self._tracked.pop(seq_id)
            if not tracked.stream.seq.is_finished:
                self.engine.abort(tracked.stream.seq)
            _deliver(tracked.sink, exc)
            _deliver(tracked.sink, None)


def _chunk_or_raise(item: GenerationChunk | Exception) -> GenerationChunk:
    if isinstance(item, Exception):  # the engine's error for this request
        raise item
    return item


def _deliver(sink: Sink, item: StreamItem) -> bool:
    """False when the receiver is gone (e.g. its event loop closed): the request is then aborted."""
    try:
        sink(item)
        return True
    except Exception:
        return False
