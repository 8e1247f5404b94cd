import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize

from gguf_loader import ModelFileError, UnsupportedModelError, open_gguf
from gguf_loader.hparams import read_hparams
from tests.models.tiny_gguf import finish_gguf


@pytest.fixture
def small_gguf(tmp_path):
    path = tmp_path / "small.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(96)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "ü", "日本"])
    writer.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.5, -3.0])
    writer.add_bool("test.flag", True)
    rng = np.random.default_rng(0)
    writer.add_tensor("f32", rng.standard_normal((3, 64)).astype(np.float32))
    q8 = quantize(rng.standard_normal((5, 64)).astype(np.float32), GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    finish_gguf(writer)
    return path


def test_metadata_and_tensors_match_gguf_py(small_gguf):
    ours = open_gguf(small_gguf)
    theirs = GGUFReader(small_gguf)
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        expected = field.contents()
        got = ours.metadata[key]
        if isinstance(expected, list):
            assert list(np.asarray(got).tolist() if isinstance(got, np.ndarray) else got) == pytest.approx(expected) \
                if expected and isinstance(expected[0], float) else list(got) == expected
        else:
            assert got == pytest.approx(expected) if isinstance(expected, float) else got == expected
    for tensor in theirs.tensors:
        mine = ours.tensor(tensor.name)
        assert mine.shape == tuple(int(d) for d in reversed(tensor.shape))
        assert np.array_equal(mine.data.reshape(-1), np.asarray(tensor.data).view(np.uint8).reshape(-1))
    assert ours.tensor("q8").type_name == "Q8_0"
    assert not ours.tensor("q8").data.flags.owndata  # zero-copy view of the mapping


def test_hparams_defaults(small_gguf):
    hp = read_hparams(open_gguf(small_gguf).metadata, vocab_size=4)
    assert (hp.num_layers, hp.num_heads, hp.num_kv_heads, hp.head_dim) == (2, 4, 2, 16)
    assert not hp.is_neox_rope and hp.rope_theta == 10000.0


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        open_gguf(tmp_path / "nope.gguf")


def test_not_gguf(tmp_path):
    path = tmp_path / "text.gguf"
    path.write_text("hello, this is not a model file at all")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        open_gguf(path)


@pytest.mark.parametrize("keep_fraction", [0.05, 0.5, 0.99])
def test_truncated(small_gguf, tmp_path, keep_fraction):
    data = small_gguf.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:int(len(data) * keep_fraction)])
    with pytest.raises(ModelFileError, match="truncated"):
        open_gguf(path)


def test_unknown_tensor_type(small_gguf, tmp_path):
    data = bytearray(small_gguf.read_bytes())
    reader = GGUFReader(small_gguf)
    field_offset = [t for t in reader.tensors if t.name == "q8"][0].field.offset
    # tensor info: name (u64 len + bytes), n_dims u32, dims u64 x n, type u32
    type_pos = field_offset + 8 + len("q8") + 4 + 2 * 8
    data[type_pos:type_pos + 4] = (250).to_bytes(4, "little")
    path = tmp_path / "badtype.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(UnsupportedModelError, match="q8"):
        open_gguf(path)
