"""The server's asyncio face of the EngineLoop: submit the n choices of one API request and iterate their chunks.

Chunks cross from the engine thread through a per-loop mailbox (`call_soon_threadsafe` for the first chunk since
the loop last emptied it), so the event loop never blocks on a queue and a decode step's chunks for every stream
wake it once, not once a stream.
Leaving the iteration early (client gone, error, cancellation) aborts every choice still running, which frees
their KV blocks at the engine's next step.
"""
from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

from ..engine.engine_loop import EngineLoop, Request, StreamItem
from ..engine.outputs import GenerationChunk
from ..sampling_params import SamplingParams

DISCONNECT_POLL_SECONDS = 0.5


class ClientDisconnected(Exception):
    """The HTTP client went away; its requests have been aborted."""


class EngineClient:
    def __init__(self, engine_loop: EngineLoop):
        self.engine_loop = engine_loop
        self.engine = engine_loop.engine
        self._mailboxes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> LoopMailbox

    async def stream(self, prompt_token_ids: list[int], params_per_choice: list[SamplingParams],
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                     ) -> AsyncIterator[tuple[int, GenerationChunk]]:
        """(choice index, chunk) pairs as the engine makes them; an engine error is raised here."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[tuple[int, StreamItem]] = asyncio.Queue()
        requests = [Request(list(prompt_token_ids), params) for params in params_per_choice]
        open_choices = set(range(len(requests)))
        try:
            mailbox = self._mailboxes.get(loop)
            if mailbox is None:
                mailbox = self._mailboxes[loop] = LoopMailbox(loop)
            for index, request in enumerate(requests):
                self.engine_loop.submit(request, mailbox.sink(items, index))
            while open_choices:
                index, item = await self._next(items, is_disconnected)
                if item is None:
                    open_choices.discard(index)
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield index, item
        finally:
            for index in open_choices:
                self.engine_loop.abort(requests[index].request_id)

    @staticmethod
    async def _next(items: asyncio.Queue, is_disconnected) -> tuple[int, StreamItem]:
        if is_disconnected is None:
            return await items.get()
        while True:
            try:
                return await asyncio.wait_for(items.get(), DISCONNECT_POLL_SECONDS)
            except asyncio.TimeoutError:
                if await is_disconnected():
                    raise ClientDisconnected() from None


class LoopMailbox:
    """Items posted from other threads for asyncio queues of one event loop, handed over in batches: the first item
    since the loop last drained the mailbox schedules a drain, later ones only join the list."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue, object]] = []

    def sink(self, items: asyncio.Queue, index: int):
        """An EngineLoop sink putting (index, item) on `items`."""
        def put(item: StreamItem) -> None:
            self.post(items, (index, item))
        return put

    def post(self, items: asyncio.Queue, value) -> None:
        """Queue `value` for items.put_nowait on the loop's thread; raises RuntimeError once the loop is closed
        (the EngineLoop then aborts the request)."""
        if self._loop.is_closed():
            raise RuntimeError("the event loop is closed")
        with self._lock:
            self._pending.append((items, value))
            if len(self._pending) > 1:
                return  # a drain is already scheduled
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            with self._lock:
                self._pending.clear()
            raise

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for items, value in pending:
            items.put_nowait(value)
