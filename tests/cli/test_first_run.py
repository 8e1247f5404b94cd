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
    import threading
    import time

    from pocketcli.commands.first_run import ChildChain, FirstRunFailed

    chain, failures = ChildChain(lambda progress: None), []

    def run() -> None:
        try:
            chain.run(first_run_rehearsals.sleep_long, stamp)
        except FirstRunFailed as exc:
            failures.append(str(exc))

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 30
    while chain.child is None and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    chain.cancel()
    runner.join(timeout=10)
    assert not runner.is_alive() and failures == ["cancelled"]
    assert time.monotonic() - started < 5
    assert chain.child.poll() is not None and not stamp.exists()
