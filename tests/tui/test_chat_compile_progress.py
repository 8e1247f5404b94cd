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
        # a cold cache (CI): the app's own compile burst, if any, ends first so its reports cannot cut in
        await wait_until(pilot, lambda: not app.engine.compile_watch.is_compiling(), timeout_s=300)
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


async def test_a_first_runs_children_report_to_the_status_bar(tiny_model, data_dir, tmp_path, monkeypatch):
    """A cold cache's first run (commands/chat.py: AppFirstRun) compiles in child processes while the app is up:
    their progress comes to the app (here three tiny kernels in three children, as the real chain cuts them)."""
    from pocketcli.commands.first_run import ChildChain
    from tests.cli import first_run_rehearsals

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    stamp = tmp_path / "numba" / "pocket_first_run" / "model.done"
    seen = []

    def first_run(model, on_progress) -> None:
        def report(progress) -> None:
            seen.append(progress)
            on_progress(progress)

        ChildChain(report, compiles_per_child=1).run(first_run_rehearsals.compile_three, stamp)

    app = build(tiny_model)
    app.session.first_run = first_run
    first_run.cancel = lambda: None
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await wait_until(pilot, lambda: any("compiled 3 kernels in" in message for _, message in app.notified))
        assert "compiling" not in status_text(screen)
    assert stamp.exists() and [progress.num_compiled for progress in seen if progress.is_done] == [3]
