"""--threads N is the most threads: every count follows the free cores (the engine's FreeCoreThreads)."""
import argparse

import numba
import pytest

from pocketcli.commands.common import add_engine_arguments, engine_config, set_cpu_threads
from pocketcli.errors import UsageError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser, "generate")
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("argv", [(), ("-t", "0"), ("-t", "1"), ("--threads", "2")])
def test_every_thread_count_follows_the_free_cores(argv):
    assert engine_config(_parse("--device", "cpu", *argv), "model.gguf").follow_free_cores is True


def test_negative_thread_count_is_a_usage_error():
    with pytest.raises(UsageError, match="--threads must be >= 0"):
        set_cpu_threads(-1)


@pytest.fixture
def tiny_model(tmp_path) -> str:
    from tests.models.tiny_gguf import write_tiny_model

    return str(write_tiny_model(tmp_path / "tiny.gguf", "llama"))


def _free_core_threads(path: str, **config):
    from pocketcli.config import EngineConfig
    from pocketcli.engine.llm_engine import LLMEngine

    return LLMEngine(EngineConfig(model_path=path, ctx_size=64, **config)).free_core_threads


def test_engine_follows_the_free_cores_only_when_asked(tiny_model):
    """A library user's own numba.set_num_threads is left alone; the CLI turns the policy on."""
    assert _free_core_threads(tiny_model) is None
    following = _free_core_threads(tiny_model, follow_free_cores=True)
    assert following is not None and following.max_threads == min(numba.get_num_threads(), len(following.cpus))


def test_the_thread_count_set_before_the_engine_is_its_most(tiny_model):
    """pocket -t 1 sets one thread before building the engine: following the free cores never adds a second."""
    before = numba.get_num_threads()
    try:
        set_cpu_threads(1)
        assert _free_core_threads(tiny_model, follow_free_cores=True).max_threads == 1
    finally:
        numba.set_num_threads(before)
