"""While numba compiles kernels (a cold cache) the chat app's status bar says which and how many; a toast sums
them up when they are done."""
import threading
import time

import numba

from pocketcli.compile_progress import CompileProgress
from tests.tui.pilot import SIZE, build, ready


def status_text(screen) -> str:
    return str(screen.query_one("#status").render())


async def wait_until(pilot, condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.02)


async def test_progress_posted_from_another_thread_shows_in_the_status_bar(tiny_model, data_dir):
    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        post = app.engine._post_compile_progress  # what the app's compile watch calls
        poster = threading.Thread(target=post, args=(CompileProgress("rms_norm", 12, True, 8.06, expected_total=37),))
        poster.start()
        poster.join()
        await wait_until(pilot, lambda: "compiling kernels" in status_text(screen))
        assert status_text(screen).endswith("│ compiling kernels (12 of 37, 8.1 s): rms_norm")
        post(CompileProgress("rms_norm", 37, True, 41.24, expected_total=37, is_done=True))
        await wait_until(pilot, lambda: "compiling" not in status_text(screen))
        assert ("information", "compiled 37 kernels in 41.2 s (cached for later runs)") in app.notified


async def test_a_compile_on_the_engine_thread_is_reported(tiny_model, data_dir):
    @numba.njit(cache=False)
    def add_one(x):
        return x + 1.0

    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        app.session.loop.call(lambda: add_one(1.0))  # compiles on the engine thread, as a first reply's kernels do
        await wait_until(pilot, lambda: any("compiled 1 kernel in" in message for _, message in app.notified))
        assert "compiling" not in status_text(screen)
