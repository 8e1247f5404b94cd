"""`pocket serve`'s first run (commands/first_run.py): the chain rehearses the load and its warm-up on all the
threads a quiet machine gives the server, and a side child compiles the decode step from the weights' types."""
import functools

from pocketcli.cli import make_parser
from pocketcli.commands import first_run, serve
from pocketcli.registry import resolve_model


def serve_args(*extra):
    return make_parser().parse_args(["serve", "-m", resolve_model(None), "--port", "0", "--ctx-size", "256", *extra])


def test_serve_first_run_compiles_the_decode_step_in_a_side_child(monkeypatch):
    calls = []

    def first_run_kernels(args, model_path, rehearsal, side_rehearsal=None, tail_rehearsal=None):
        calls.append((model_path, rehearsal, side_rehearsal))
        return 2  # as a failed child would: serve returns before it opens the port

    monkeypatch.setattr(first_run, "compile_first_run_kernels", first_run_kernels)
    assert serve.run(serve_args()) == 2
    (model_path, rehearsal, side_rehearsal), = calls
    assert model_path == resolve_model(None)
    assert isinstance(rehearsal, functools.partial) and rehearsal.func is serve.rehearse
    assert isinstance(side_rehearsal, functools.partial) and side_rehearsal.func is serve.rehearse_decode_step
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
