"""--threads: an explicit count is kept; the default follows the free cores (the engine's FreeCoreThreads)."""
import argparse

import pytest

from pocketcli.commands.common import add_engine_arguments, parallel_config, set_cpu_threads
from pocketcli.errors import UsageError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("argv, follows", [((), True), (("-t", "0"), True), (("-t", "1"), False),
                                           (("--threads", "2"), False)])
def test_only_the_default_thread_count_follows_the_free_cores(argv, follows):
    assert parallel_config(_parse(*argv), "cpu")["follow_free_cores"] is follows


def test_negative_thread_count_is_a_usage_error():
    with pytest.raises(UsageError, match="--threads must be >= 0"):
        set_cpu_threads(-1)


def test_engine_follows_the_free_cores_only_when_asked(tmp_path):
    """A library user's own numba.set_num_threads is left alone; the CLI default turns the policy on."""
    from pocketcli.config import EngineConfig
    from pocketcli.engine.llm_engine import LLMEngine
    from tests.models.tiny_gguf import write_tiny_model

    path = str(write_tiny_model(tmp_path / "tiny.gguf", "llama"))
    assert LLMEngine(EngineConfig(model_path=path, ctx_size=64)).free_core_threads is None
    assert LLMEngine(EngineConfig(model_path=path, ctx_size=64, follow_free_cores=True)).free_core_threads is not None
