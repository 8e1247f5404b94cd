"""The server's asyncio face of the EngineLoop: submit the n choices of one API request and iterate their chunks.

Chunks cross from the engine thread with `call_soon_threadsafe`, so the event loop never blocks on a queue.
Leaving the iteration early (client gone, error, cancellation) aborts every choice still running, which frees
their KV blocks at the engine's next step.
"""
from __future__ import annotations

import asyncio
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

    async def stream(self, prompt_token_ids: list[int], params_per_choice: list[SamplingParams],
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                     ) -> AsyncIterator[tuple[int, GenerationChunk]]:
        """(choice index, chunk) pairs as the engine makes them; an engine error is raised here."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[tuple[int, StreamItem]] = asyncio.Queue()
        requests = [Request(list(prompt_token_ids), params) for params in params_per_choice]
        open_choices = set(range(len(requests)))
        try:
            for index, request in enumerate(requests):
                self.engine_loop.submit(request, _threadsafe_sink(loop, items, index))
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


def _threadsafe_sink(loop: asyncio.AbstractEventLoop, items: asyncio.Queue, index: int):
    def sink(item: StreamItem) -> None:
        loop.call_soon_threadsafe(items.put_nowait, (index, item))  # raises once the loop is closed
    return sink
