"""The first runs of `pocket serve`, `pocket bench` and `pocket chat` (commands/first_run.py): a side child compiles
the decode step from the weights' types beside the chain, and serve's and bench's chains rehearse on all the threads
a quiet machine gives the command, which loads once the side child is done."""
import functools

from pocketcli.cli import make_parser
from pocketcli.commands import first_run, serve
from pocketcli.registry import resolve_model


def serve_args(*extra):
    return make_parser().parse_args(["serve", "-m", resolve_model(None), "--port", "0", "--ctx-size", "256", *extra])


def test_serve_first_run_compiles_the_decode_step_in_a_side_child(monkeypatch):
    calls = []

    def first_run_kernels(args, model_path, rehearsal, side_rehearsal=None, tail_rehearsal=None):
        calls.append((model_path, rehearsal, side_rehearsal, tail_rehearsal))
        return 2  # as a failed child would: serve returns before it opens the port

    monkeypatch.setattr(first_run, "compile_first_run_kernels", first_run_kernels)
    assert serve.run(serve_args()) == 2
    (model_path, rehearsal, side_rehearsal, tail_rehearsal), = calls
    assert model_path == resolve_model(None)
    assert tail_rehearsal is None  # its chain waits for the side child's kernels: a tail child would redo them
    assert isinstance(rehearsal, functools.partial) and rehearsal.func is serve.rehearse
    assert isinstance(side_rehearsal, functools.partial) and side_rehearsal.func is first_run.rehearse_decode_step
    config, = side_rehearsal.args
    assert config.model_path == model_path and config.ctx_size == 256


def test_serve_rehearses_on_all_its_threads_whatever_the_side_child_keeps_busy(monkeypatch):
    """Following the free cores, the chain took one thread beside the side child, and the server, loading after
    it on two, compiled the parallel kernels itself."""
    from pocketcli import engine_factory
    from pocketcli.engine import warm_up

    configs, engines = [], []
    monkeypatch.setattr(engine_factory, "make_engine", lambda config: configs.append(config) or "engine")
    monkeypatch.setattr(warm_up, "warm_up", engines.append)
    config = serve.make_engine_config(serve_args())
    assert config.follow_free_cores  # the server itself follows them
    serve.rehearse(config, 0)
    assert engines == ["engine"] and configs[0].follow_free_cores is False
    assert configs[0].model_path == config.model_path and configs[0].ctx_size == config.ctx_size


def test_bench_first_run_compiles_the_decode_step_in_a_side_child_and_rehearses_on_all_threads(monkeypatch):
    from pocketcli import engine_factory
    from pocketcli.commands import bench

    calls, configs = [], []

    def first_run_kernels(args, model_path, rehearsal, side_rehearsal=None, tail_rehearsal=None):
        calls.append((rehearsal, side_rehearsal, tail_rehearsal))
        return 2

    monkeypatch.setattr(first_run, "compile_first_run_kernels", first_run_kernels)
    args = make_parser().parse_args(["bench", "-m", resolve_model(None), "-p", "32", "-n", "8"])
    assert bench.run(args) == 2
    (rehearsal, side_rehearsal, tail_rehearsal), = calls
    assert side_rehearsal.func is first_run.rehearse_decode_step and tail_rehearsal is None
    config, = side_rehearsal.args
    assert config.model_path == resolve_model(None) and config.ctx_size == 32 + 8 + 16  # bench's context

    class Stop(Exception):
        pass

    def make_engine(config):
        configs.append(config)
        raise Stop

    monkeypatch.setattr(engine_factory, "make_engine", make_engine)
    try:
        rehearsal()
    except Stop:
        pass
    assert configs[0].follow_free_cores is False and configs[0].enable_prefix_caching is False


def test_chat_first_run_compiles_the_decode_step_in_a_side_child(monkeypatch):
    from pocketcli.commands import chat

    calls = []

    def first_run_kernels(args, model_path, rehearsal, side_rehearsal=None, tail_rehearsal=None):
        calls.append((model_path, side_rehearsal, tail_rehearsal))
        return 2

    monkeypatch.setattr(first_run, "compile_first_run_kernels", first_run_kernels)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    args = make_parser().parse_args(["chat", "--plain", "-m", resolve_model(None), "--ctx-size", "128"])
    assert chat.run(args) == 2
    (model_path, side_rehearsal, tail_rehearsal), = calls
    assert side_rehearsal.func is first_run.rehearse_decode_step and tail_rehearsal is None
    config, = side_rehearsal.args
    assert config.model_path == model_path == resolve_model(None) and config.ctx_size == 128


def test_the_chat_apps_first_run_passes_the_decode_step_rehearsals(monkeypatch, tmp_path):
    from pocketcli.commands import chat

    runs = []
    monkeypatch.setattr(first_run, "cold_stamp", lambda args, model_path: tmp_path / "model.done")
    monkeypatch.setattr(first_run.ChildChain, "run", lambda self, rehearsal, stamp, **rehearsals: runs.append(
        (rehearsal, stamp, rehearsals)))
    args = make_parser().parse_args(["chat", "-m", resolve_model(None), "--ctx-size", "128"])
    session = chat.make_session(args)
    chat.AppFirstRun(args, session.engine_options)(resolve_model(None), lambda progress: None)
    (rehearsal, stamp, rehearsals), = runs
    assert rehearsal.func is chat.rehearse and stamp == tmp_path / "model.done"
    side = rehearsals.pop("side_rehearsal")
    assert side.func is first_run.rehearse_decode_step and not rehearsals
    assert side.args[0].model_path == resolve_model(None) and side.args[0].ctx_size == 128


SIDE_CHILD_IMPORTS = """
import sys
import llvmlite.binding as llvm
from pocketcli.commands import first_run
from pocketcli.engine.decode_step_ahead import compile_decode_step_ahead, defer_row_codecs
assert "kernels_numba.cpu" not in sys.modules  # the deferral must come before the kernels' import
defer_row_codecs()
from kernels_numba.cpu import kv_row
assert not llvm.address_of_symbol(kv_row.DECODE_SYMBOL)
print("deferred")
"""


def test_a_side_childs_rehearsal_can_defer_the_row_codecs():
    """rehearse_decode_step defers the KV row codecs (the chain compiles them meanwhile) before anything it has
    imported has imported the kernels."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SIDE_CHILD_IMPORTS], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "deferred", done.stderr[-3000:]
