"""Run layouts kept on disk (run_layout_store.py): a second load reads the stored copy instead of regrouping, a
changed model file is never served an old copy, a stored file cut short is regrouped again, and the store stays
under its size limit."""
import os

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from gguf_loader.reader import GGUFFile
from kernels_numba.cpu.matvec import dispatch, run_layout, run_layout_store
from tests.kernels.kernel_test_data import random_weight
from tests.models.tiny_gguf import finish_gguf

pytestmark = pytest.mark.skipif(not dispatch.USE_RUN_LAYOUT, reason="the run layout needs integer dot instructions")


@pytest.fixture
def store(tmp_path, monkeypatch):
    folder = tmp_path / "run_layout"
    monkeypatch.setenv(run_layout_store.DIR_ENV, str(folder))
    monkeypatch.delenv(run_layout_store.LIMIT_ENV, raising=False)
    return folder


def _model_file(path, weights):
    """A GGUF holding `weights` (WeightTensors) as they are, opened (mapped) as a model file."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, w in weights.items():
        writer.add_tensor(name, np.asarray(w.data), raw_dtype=w.ggml_type)
    finish_gguf(writer)
    return GGUFFile(path)


def test_a_second_load_reads_the_stored_layout(store, tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    weights = {"a.weight": random_weight(QT.Q5_0, (8, 576), rng), "b.weight": random_weight(QT.Q4_K, (4, 512), rng)}
    model = _model_file(tmp_path / "m.gguf", weights)
    first = {name: run_layout.run_weights(model.tensor(name)) for name in weights}
    assert len(list(store.glob("*.runs"))) == 2

    def no_repack(*args, **kwargs):
        raise AssertionError("regrouped again")
    monkeypatch.setattr(run_layout, "repack", no_repack)
    again = GGUFFile(tmp_path / "m.gguf")
    for name in weights:
        second = run_layout.run_weights(again.tensor(name))
        assert second.code == first[name].code and not second.data.flags.writeable
        np.testing.assert_array_equal(second.data, first[name].data)


def test_a_stored_layout_cut_short_is_regrouped(store, tmp_path):
    rng = np.random.default_rng(3)
    weight = random_weight(QT.Q4_1, (8, 512), rng)
    path = tmp_path / "m.gguf"
    first = run_layout.run_weights(_model_file(path, {"a.weight": weight}).tensor("a.weight"))
    (stored,) = store.glob("*.runs")
    stored.write_bytes(stored.read_bytes()[:-100])
    again = run_layout.run_weights(GGUFFile(path).tensor("a.weight"))
    np.testing.assert_array_equal(again.data, first.data)
    assert stored.stat().st_size == first.data.nbytes  # written whole again


def test_load_layout_reads_into_the_array_it_is_given(store, tmp_path):
    layout = np.arange(3 * 40, dtype=np.uint8).reshape(3, 40)
    run_layout_store.save_layout("k", layout)
    given = []

    def empty(shape):
        given.append(np.full(shape, 255, dtype=np.uint8))
        return given[-1]
    loaded = run_layout_store.load_layout("k", (3, 40), empty)
    assert loaded is given[0]
    np.testing.assert_array_equal(loaded, layout)
    assert run_layout_store.load_layout("k", (4, 40), empty) is None  # another shape: not this file


def test_a_changed_model_file_is_regrouped(store, tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "m.gguf"
    run_layout.run_weights(_model_file(path, {"a.weight": random_weight(QT.Q4_0, (4, 256), rng)}).tensor("a.weight"))
    changed = random_weight(QT.Q4_0, (4, 256), rng)
    model = _model_file(path, {"a.weight": changed})
    os.utime(path, ns=(1, 1))  # a rewrite within the mtime's resolution still differs by mtime here
    runs = run_layout.run_weights(model.tensor("a.weight"))
    np.testing.assert_array_equal(runs.data, run_layout.repack(run_layout.qt.Q4_0, np.asarray(changed.data)))


def test_the_store_evicts_the_least_recently_used_beyond_its_limit(store):
    store.mkdir()
    for i, age in enumerate((30, 10, 20)):
        path = store / f"{i}.runs"
        path.write_bytes(b"x" * 1000)
        os.utime(path, ns=(age, age))
    run_layout_store.evict(store, 2000)
    assert sorted(p.name for p in store.glob("*.runs")) == ["0.runs", "2.runs"]


def test_nothing_is_kept_without_a_folder_or_for_arrays_not_mapped(monkeypatch):
    monkeypatch.delenv(run_layout_store.DIR_ENV, raising=False)
    assert run_layout_store.store_dir() is None
    assert run_layout_store.layout_key(np.zeros((2, 18), np.uint8), 18) is None
