"""A first run compiles its kernels in child processes (pocketcli/commands/first_run.py): a child stops itself
after its share of compiles and the next goes on from the cache; a child's error, a Ctrl-C or a killed child ends
the command in one line; the stamp is left only once a child completed. Three tiny kernels, ~1 s a child."""
import pytest

from pocketcli.commands.first_run import run_children
from tests.cli import first_run_rehearsals


@pytest.fixture
def stamp(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    return tmp_path / "numba" / "pocket_first_run" / "model.done"


def test_children_take_turns_and_the_count_carries_on(stamp, capfd):
    assert run_children(first_run_rehearsals.compile_three, stamp, compiles_per_child=1) == 0
    err = capfd.readouterr().err
    assert stamp.exists()
    assert err.startswith("first run: compiling the CPU kernels")
    assert err.splitlines()[-1].startswith("compiled 3 kernels in ")  # the third child, counting the other two's


def test_a_childs_error_ends_the_command_in_one_line(stamp, capfd):
    assert run_children(first_run_rehearsals.fail_as_bad_input, stamp) == 2
    assert capfd.readouterr().err.splitlines()[1:] == ["error: model file is not a GGUF"]
    assert not stamp.exists()


def test_ctrl_c_in_a_child_interrupts_the_command(stamp):
    with pytest.raises(KeyboardInterrupt):
        run_children(first_run_rehearsals.interrupt, stamp)
    assert not stamp.exists()


def test_a_killed_child_is_named(stamp, capfd):
    assert run_children(first_run_rehearsals.die, stamp) == 1
    assert capfd.readouterr().err.splitlines()[1:] == ["error: the process compiling the kernels was killed (SIGKILL)"]


@pytest.mark.parametrize("damage", ["not a GGUF file", "truncated"])
def test_a_broken_model_gets_one_line_and_no_first_run(stamp, monkeypatch, capsys, tmp_path, damage):
    """The model's header is read before any child starts: the command's own load reports a bad file, alone."""
    from pocketcli.cli import main
    from tests.models.tiny_gguf import write_tiny_model

    monkeypatch.setenv("POCKET_FIRST_RUN_CHILDREN", "1")
    path = tmp_path / "bad.gguf"
    if damage == "truncated":
        data = write_tiny_model(tmp_path / "tiny.gguf", "llama").read_bytes()
        path.write_bytes(data[:len(data) * 2 // 3])
    else:
        path.write_bytes(b"just some text that is long enough to be read as a header\n" * 4)
    assert main(["generate", "-m", str(path), "-p", "hi"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and damage in lines[0], lines
    assert not (stamp.parent).exists() or not any(stamp.parent.iterdir())


def test_a_chain_for_the_app_reports_progress_to_a_callback(stamp, capfd):
    """The chat app's way (ChildChain): the children's progress comes back as CompileProgress, nothing on stderr."""
    from pocketcli.commands.first_run import ChildChain

    reports = []
    ChildChain(reports.append, compiles_per_child=1).run(first_run_rehearsals.compile_three, stamp)
    assert stamp.exists()
    assert capfd.readouterr().err == ""
    assert [report.num_compiled for report in reports if report.is_done] == [3]  # carried on over three children
    assert all(report.kernel for report in reports)
    counts = [report.num_compiled for report in reports]
    assert counts == sorted(counts)


def test_a_chain_for_the_app_raises_the_childs_error_line(stamp):
    from pocketcli.commands.first_run import ChildChain, FirstRunFailed

    with pytest.raises(FirstRunFailed, match="^model file is not a GGUF$"):
        ChildChain(lambda progress: None).run(first_run_rehearsals.fail_as_bad_input, stamp)
    with pytest.raises(FirstRunFailed, match=r"killed \(SIGKILL\)"):
        ChildChain(lambda progress: None).run(first_run_rehearsals.die, stamp)
    assert not stamp.exists()


def test_cancelling_a_chain_kills_its_child(stamp):
    """Closing the chat app while a first run compiles: the child at work is killed, the load fails at once."""
    from pocketcli.commands.first_run import ChildChain

    chain = ChildChain(lambda progress: None)
    failures, seconds = cancel_once_at_work(chain, stamp)
    assert failures == ["cancelled"] and seconds < 5
    assert chain.child.poll() is not None and not stamp.exists()


def cancel_once_at_work(chain, stamp, **run_options) -> tuple[list[str], float]:
    """Runs chain.run(sleep_long, stamp, **run_options) on a thread and cancels it once its child is at work: the
    FirstRunFailed messages, and the seconds from the cancel to run()'s end (at most 10)."""
    import threading
    import time

    from pocketcli.commands.first_run import FirstRunFailed

    failures: list[str] = []

    def run() -> None:
        try:
            chain.run(first_run_rehearsals.sleep_long, stamp, **run_options)
        except FirstRunFailed as exc:
            failures.append(str(exc))

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 30
    while chain.child is None and time.monotonic() < deadline:
        time.sleep(0.01)
    cancelled = time.monotonic()
    chain.cancel()
    runner.join(timeout=10)
    assert not runner.is_alive()
    return failures, time.monotonic() - cancelled


def cached_kernel_names(cache_dir) -> set[str]:
    """The functions numba's cache holds an index for (their qualified names, as the index files begin)."""
    return {path.name.split("-")[0] for path in cache_dir.rglob("*.nbi")}


@pytest.fixture
def two_cores(monkeypatch):
    """A side child starts only where a second core is free: the tests run it on any machine."""
    from pocketcli.commands import first_run

    monkeypatch.setattr(first_run, "usable_cores", lambda: 2)


def test_a_side_child_compiles_beside_the_chain_and_is_not_counted(stamp, capfd, two_cores):
    """The decode step's kernels compile in a side child while the chain works: they are cached once it has
    ended, and the progress line counts the chain's compiles only."""
    from pocketcli.commands import first_run

    assert run_children(first_run_rehearsals.compile_three, stamp,
                        side_rehearsal=first_run_rehearsals.compile_side) == 0
    first_run.end_side_child()
    names = cached_kernel_names(stamp.parents[1])
    assert {"first_run_rehearsals.add_one", "first_run_rehearsals.add_four"} <= names, names
    assert capfd.readouterr().err.splitlines()[-1].startswith("compiled 3 kernels in ")


def test_a_failing_side_child_does_not_fail_the_command(stamp, capfd, two_cores):
    from pocketcli.commands import first_run

    assert run_children(first_run_rehearsals.compile_three, stamp, side_rehearsal=first_run_rehearsals.die) == 0
    first_run.end_side_child()
    assert stamp.exists()
    assert "error" not in capfd.readouterr().err


def test_a_side_child_is_stopped_when_the_chain_fails_or_is_interrupted(stamp, two_cores, monkeypatch):
    import subprocess
    import time

    from pocketcli.commands import first_run

    started = []
    start = first_run.start_side_child
    monkeypatch.setattr(first_run, "start_side_child",
                        lambda rehearsal: started.append(start(rehearsal)) or started[-1])
    began = time.monotonic()
    assert run_children(first_run_rehearsals.fail_as_bad_input, stamp,
                        side_rehearsal=first_run_rehearsals.sleep_long) == 2
    with pytest.raises(KeyboardInterrupt):
        run_children(first_run_rehearsals.interrupt, stamp, side_rehearsal=first_run_rehearsals.sleep_long)
    assert time.monotonic() - began < 30  # not the side child's 60 s
    assert len(started) == 2 and all(child.poll() is not None for child in started)
    assert all(isinstance(child, subprocess.Popen) for child in started)


def test_a_single_core_runs_no_side_child(stamp, monkeypatch):
    from pocketcli.commands import first_run

    monkeypatch.setattr(first_run, "usable_cores", lambda: 1)
    assert first_run.start_side_child(first_run_rehearsals.compile_side) is None


def test_the_first_decode_step_waits_for_a_side_child_left_at_work(stamp, two_cores):
    """generate's chain stops at the first token: its side child goes on, and the engine's first step with a
    decode in it waits for it (the steps before do not)."""
    import time
    from types import SimpleNamespace

    from pocketcli.commands import first_run

    assert run_children(first_run_rehearsals.compile_three, stamp,
                        side_rehearsal=first_run_rehearsals.sleep_briefly) == 0
    [child] = first_run._side_children
    assert child.poll() is None
    seq = SimpleNamespace(num_completion_tokens=0)
    steps = []
    engine = SimpleNamespace(scheduler=SimpleNamespace(running=[seq]))
    engine.step = lambda: steps.append(child.poll())
    first_run.hold_decode_for_side_child(engine)
    engine.step()  # the prompt's step: no wait
    seq.num_completion_tokens = 1
    engine.step()  # the first decode: after the side child
    engine.step()
    assert steps[0] is None and steps[1] == 0 and steps[2] == 0
    assert first_run._side_children == []
    assert first_run.side_child_wait_seconds() > 0.5  # generate's timings count it as kernel compiling


def test_a_tail_child_joins_a_side_child_still_at_work_and_the_decode_waits_for_both(stamp, two_cores):
    """Once the chain has completed, a side child still at work gets a tail child beside it (the kernels it would
    compile last): the first decode step waits for both."""
    from pocketcli.commands import first_run

    assert run_children(first_run_rehearsals.compile_three, stamp, side_rehearsal=first_run_rehearsals.sleep_briefly,
                        tail_rehearsal=first_run_rehearsals.compile_tail) == 0
    side, tail = first_run._side_children
    first_run.end_side_child()
    assert side.returncode == 0 and tail.returncode == 0
    assert "first_run_rehearsals.add_five" in cached_kernel_names(stamp.parents[1])
    assert first_run._side_children == []


def test_no_tail_child_once_the_side_child_is_done(stamp, two_cores, monkeypatch):
    import time

    from pocketcli.commands import first_run

    def chain_after_the_side_child(*args) -> int:
        deadline = time.monotonic() + 60
        while "first_run_rehearsals.add_four" not in cached_kernel_names(stamp.parents[1]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(2)  # its exit
        return 0

    monkeypatch.setattr(first_run, "_run_chain", chain_after_the_side_child)
    assert run_children(first_run_rehearsals.compile_three, stamp, side_rehearsal=first_run_rehearsals.compile_side,
                        tail_rehearsal=first_run_rehearsals.sleep_long) == 0
    [side] = first_run._side_children
    first_run.end_side_child()
    assert side.returncode == 0


def test_the_apps_chain_runs_a_side_child_and_waits_for_it(stamp, two_cores):
    """The chat app's chain (ChildChain) runs its side rehearsal beside the children and lets it finish after the
    chain completes: its kernel is cached when run() returns, with no side child left."""
    from pocketcli.commands.first_run import ChildChain

    chain = ChildChain(lambda progress: None)
    chain.run(first_run_rehearsals.compile_three, stamp, side_rehearsal=first_run_rehearsals.compile_side)
    assert stamp.exists() and chain.side is None
    assert {"first_run_rehearsals.add_three", "first_run_rehearsals.add_four"} <= cached_kernel_names(
        stamp.parents[1])


def test_the_apps_side_child_is_stopped_when_the_chain_fails_or_is_cancelled(stamp, two_cores, monkeypatch):
    import subprocess

    from pocketcli.commands import first_run
    from pocketcli.commands.first_run import ChildChain, FirstRunFailed

    sides: list[subprocess.Popen] = []
    start_side_child = first_run.start_side_child
    monkeypatch.setattr(first_run, "start_side_child", lambda rehearsal: sides.append(start_side_child(rehearsal))
                        or sides[-1])
    with pytest.raises(FirstRunFailed):
        ChildChain(lambda progress: None).run(first_run_rehearsals.fail_as_bad_input, stamp,
                                              side_rehearsal=first_run_rehearsals.sleep_long)
    assert sides[-1].poll() is not None  # stopped at once, not after its minute

    chain = ChildChain(lambda progress: None)
    failures, seconds = cancel_once_at_work(chain, stamp, side_rehearsal=first_run_rehearsals.sleep_long)
    assert failures == ["cancelled"] and seconds < 5
    assert sides[-1].poll() is not None and not stamp.exists()
