"""The engine thread's mailbox into the server's event loop: items from another thread arrive in order, a burst of
them costs one scheduled drain, and a closed loop refuses items (so the EngineLoop aborts the request)."""
import asyncio
import threading

import pytest

from pocketcli.server.engine_client import LoopMailbox


def test_a_burst_from_another_thread_arrives_in_order_with_one_drain():
    async def main():
        loop = asyncio.get_running_loop()
        mailbox = LoopMailbox(loop)
        scheduled = []
        original = loop.call_soon_threadsafe

        def counting(callback, *args):
            scheduled.append(callback)
            return original(callback, *args)

        loop.call_soon_threadsafe = counting
        first, second = asyncio.Queue(), asyncio.Queue()
        sinks = [mailbox.sink(first, 0), mailbox.sink(second, 1)]

        def engine_thread():
            for step in range(5):
                for sink in sinks:
                    sink(f"chunk {step}")

        thread = threading.Thread(target=engine_thread)
        thread.start()
        thread.join()  # the loop has not run meanwhile: every item waits in one batch
        got = [[(await queue.get()) for _ in range(5)] for queue in (first, second)]
        assert got == [[(i, f"chunk {step}") for step in range(5)] for i in (0, 1)]
        assert len(scheduled) == 1
        sinks[0](None)  # after the drain, the next item schedules a new one
        assert await first.get() == (0, None) and len(scheduled) == 2

    asyncio.run(main())


def test_a_closed_loop_refuses_items():
    loop = asyncio.new_event_loop()
    mailbox = LoopMailbox(loop)
    sink = mailbox.sink(asyncio.Queue(), 0)
    loop.close()
    with pytest.raises(RuntimeError):
        sink("late chunk")
