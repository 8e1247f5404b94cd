"""The embedding of a mapped table reads its rows from the file: same bits, none of the mapping resident."""
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernel_test_data import random_row_bytes
from gguf_loader.private_bytes import private_rows
from gguf_loader.weight_tensor import make_weight_tensor
from kernels_numba import get_ops
from tests.kernels.resident_memory import resident_kib


def _mapped_table(tmp_path, ggml_type, rows, cols, lead_bytes=100):
    raw = random_row_bytes(ggml_type, rows, cols, np.random.default_rng(int(ggml_type)))
    path = tmp_path / "table.bin"
    with open(path, "wb") as handle:  # an odd offset, as a tensor in a GGUF file has
        handle.write(bytes(lead_bytes))
        handle.write(raw.tobytes())
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    return str(path), raw, make_weight_tensor("token_embd.weight", ggml_type, (rows, cols), mapped[lead_bytes:])


def test_private_rows_reads_the_rows_and_only_from_a_mapping(tmp_path):
    _, raw, w = _mapped_table(tmp_path, QT.Q8_0, 40, 64)
    ids = np.array([39, 0, 7, 7])
    np.testing.assert_array_equal(private_rows(np.asarray(w.data), ids), raw.reshape(40, -1)[ids])
    assert private_rows(raw.reshape(40, -1), ids) is None  # no mapping: the caller reads the array itself


@pytest.mark.parametrize("ggml_type", [QT.Q8_0, QT.Q6_K, QT.F32], ids=lambda t: t.name)
def test_embedding_of_a_mapped_table_is_exact_and_leaves_the_mapping_cold(tmp_path, ggml_type):
    path, raw, w = _mapped_table(tmp_path, ggml_type, 300, 256)
    ids = np.array([5, 299, 0, 5, 150])
    in_memory = make_weight_tensor("w", ggml_type, (300, 256), raw)
    expected = get_ops("reference").dequantize_rows(in_memory, ids)
    out = get_ops("cpu").embedding(ids, w)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    strided = np.zeros((5, 512), dtype=np.float32)[:, ::2]  # a caller's out that is not contiguous
    get_ops("cpu").embedding(ids, w, out=strided)
    np.testing.assert_array_equal(strided, expected)
    with pytest.raises(IndexError):
        get_ops("cpu").embedding(np.array([300]), w)
    if os.path.exists("/proc/self/smaps"):
        assert resident_kib(path) == 0
