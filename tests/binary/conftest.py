"""The frozen-binary tests run after every other test of the session, and their build and default-model runs
start in a thread as soon as they are collected (frozen_binary_job.py): 3-4 minutes of work off the critical path.
"""
import pytest

from tests.binary.frozen_binary_job import FrozenBinaryJob

FROZEN_BINARY_TESTS = "test_frozen_binary.py"
_jobs: list[FrozenBinaryJob] = []


def is_frozen_binary_test(item) -> bool:
    return item.path.name == FROZEN_BINARY_TESTS and item.path.parent.name == "binary"


def pytest_collection_modifyitems(session, config, items):
    items[:] = [item for item in items if not is_frozen_binary_test(item)] + [
        item for item in items if is_frozen_binary_test(item)]


def pytest_collection_finish(session):
    if not session.config.option.collectonly and any(is_frozen_binary_test(item) for item in session.items):
        _jobs.append(FrozenBinaryJob())
        _jobs[0].start()


def pytest_unconfigure(config):
    for job in _jobs:
        job.stop()


@pytest.fixture(scope="session")
def frozen_binary_job() -> FrozenBinaryJob:
    if not _jobs:  # e.g. run through a plugin that skipped collection_finish: start it now
        _jobs.append(FrozenBinaryJob())
        _jobs[0].start()
    return _jobs[0]
