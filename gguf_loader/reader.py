"""Fast memory-mapped GGUF (v2/v3) reader: metadata, tensor infos and zero-copy tensor views.

gguf-py's GGUFReader builds a numpy view per array element and takes ~25 s on a 262k-token vocabulary;
this parser reads the header with `struct` and whole numeric arrays with one `np.frombuffer`.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import ModelFileError, UnsupportedModelError
from .string_array import StringArray, read_string_array
from .weight_tensor import WeightTensor, bytes_per_row

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
SUPPORTED_VERSIONS = (2, 3)

# GGUF value type id -> (struct format, numpy dtype) for scalar types
_SCALAR_TYPES = {
    0: ("<B", np.uint8), 1: ("<b", np.int8), 2: ("<H", np.uint16), 3: ("<h", np.int16),
    4: ("<I", np.uint32), 5: ("<i", np.int32), 6: ("<f", np.float32), 7: ("<?", np.bool_),
    10: ("<Q", np.uint64), 11: ("<q", np.int64), 12: ("<d", np.float64),
}
_STRING_TYPE = 8
_ARRAY_TYPE = 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: int
    shape: tuple[int, ...]  # numpy order (ggml's ne reversed)
    offset: int  # relative to the start of the data section


class _Cursor:
    """Reads little-endian GGUF values from a buffer, failing with a clear message when it runs out."""

    def __init__(self, buf: memoryview, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise ModelFileError(f"{self.path}: file is truncated (header ends early)")
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self) -> str:
        length = self.unpack("<Q")
        if self.pos + length > len(self.buf):
            raise ModelFileError(f"{self.path}: file is truncated (string runs past the end)")
        raw = bytes(self.buf[self.pos:self.pos + length])
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, value_type: int) -> Any:
        if value_type in _SCALAR_TYPES:
            value = self.unpack(_SCALAR_TYPES[value_type][0])
            return value.item() if hasattr(value, "item") else value
        if value_type == _STRING_TYPE:
            return self.string()
        if value_type == _ARRAY_TYPE:
            return self.array()
        raise ModelFileError(f"{self.path}: corrupt metadata (unknown value type {value_type})")

    def array(self) -> Any:
        elem_type, count = self.unpack("<I"), self.unpack("<Q")
        if elem_type in _SCALAR_TYPES:
            dtype = np.dtype(_SCALAR_TYPES[elem_type][1])
            nbytes = count * dtype.itemsize
            if self.pos + nbytes > len(self.buf):
                raise ModelFileError(f"{self.path}: file is truncated (array runs past the end)")
            # a read-only view of the mapping, not a copy: 262k token scores and types stay file pages
            values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
            self.pos += nbytes
            return values
        if elem_type == _STRING_TYPE:
            return self.string_array(count)
        return [self.value(elem_type) for _ in range(count)]

    def string_array(self, count: int) -> StringArray:
        """Left in the mapping and decoded on access: a vocabulary as Python strings would cost ~24 MiB."""
        try:
            strings, self.pos = read_string_array(self.buf, self.pos, count)
        except EOFError:
            raise ModelFileError(f"{self.path}: file is truncated (string array runs past the end)") from None
        return strings


class GGUFFile:
    """An opened GGUF file: `metadata` (key -> python/numpy value), `tensor_infos`, and `tensor(name)` views."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._mmap = _map_file(self.path)
        self.file_size = len(self._mmap)
        cursor = _Cursor(memoryview(self._mmap), self.path)
        self.version = _read_preamble(cursor)
        tensor_count, kv_count = cursor.unpack("<Q"), cursor.unpack("<Q")
        self.metadata: dict[str, Any] = _read_metadata(cursor, kv_count)
        self.tensor_infos: dict[str, TensorInfo] = _read_tensor_infos(cursor, tensor_count)
        alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        self.data_offset = (cursor.pos + alignment - 1) // alignment * alignment
        self._check_tensor_bounds()

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelFileError(f"{self.path}: metadata has no general.architecture")
        return arch

    def tensor(self, name: str) -> WeightTensor:
        info = self.tensor_infos[name]
        ggml_type = _known_type(info, self.path)
        row_length = info.shape[-1]
        num_rows = int(np.prod(info.shape[:-1], dtype=np.int64)) if len(info.shape) > 1 else 1
        row_bytes = bytes_per_row(ggml_type, row_length)
        start = self.data_offset + info.offset
        raw = self._mmap[start:start + num_rows * row_bytes].reshape(num_rows, row_bytes)
        return WeightTensor(name, ggml_type, info.shape, raw)

    def has_tensor(self, name: str) -> bool:
        return name in self.tensor_infos

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for info in self.tensor_infos.values():
            name = _type_name(info.ggml_type)
            counts[name] = counts.get(name, 0) + 1
        return counts

    def _check_tensor_bounds(self) -> None:
        for info in self.tensor_infos.values():
            ggml_type = _known_type(info, self.path)
            end = self.data_offset + info.offset + tensor_nbytes(ggml_type, info.shape)
            if end > self.file_size:
                raise ModelFileError(
                    f"{self.path}: file is truncated (tensor {info.name} needs {end} bytes, "
                    f"file has {self.file_size})")


def tensor_nbytes(ggml_type: GGMLQuantizationType, shape: tuple[int, ...]) -> int:
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    return int(np.prod(shape, dtype=np.int64)) // block_size * type_size


def _map_file(path: str) -> np.ndarray:
    if not os.path.exists(path):
        raise ModelFileError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ModelFileError(f"model path is a directory, not a GGUF file: {path}")
    if os.path.getsize(path) < 24:
        raise ModelFileError(f"{path}: not a GGUF file (too small)")
    return np.memmap(path, dtype=np.uint8, mode="r")


def _read_preamble(cursor: _Cursor) -> int:
    magic = bytes(cursor.buf[:4])
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"{cursor.path}: not a GGUF file (magic {magic!r})")
    cursor.pos = 4
    version = cursor.unpack("<I")
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(f"{cursor.path}: unsupported GGUF version {version} (supported: 2, 3)")
    return version


def _read_metadata(cursor: _Cursor, kv_count: int) -> dict[str, Any]:
    if kv_count > 1_000_000:
        raise ModelFileError(f"{cursor.path}: corrupt header ({kv_count} metadata entries)")
    metadata = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.unpack("<I"))
    return metadata


def _read_tensor_infos(cursor: _Cursor, tensor_count: int) -> dict[str, TensorInfo]:
    if tensor_count > 10_000_000:
        raise ModelFileError(f"{cursor.path}: corrupt header ({tensor_count} tensors)")
    infos = {}
    for _ in range(tensor_count):
        name = cursor.string()
        num_dims = cursor.unpack("<I")
        if num_dims > 8:
            raise ModelFileError(f"{cursor.path}: corrupt tensor info for {name} ({num_dims} dims)")
        dims = [cursor.unpack("<Q") for _ in range(num_dims)]
        ggml_type, offset = cursor.unpack("<I"), cursor.unpack("<Q")
        infos[name] = TensorInfo(name, ggml_type, tuple(reversed(dims)), offset)
    return infos


def _type_name(ggml_type: int) -> str:
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type#{ggml_type}"


def _known_type(info: TensorInfo, path: str) -> GGMLQuantizationType:
    try:
        ggml_type = GGMLQuantizationType(info.ggml_type)
    except ValueError:
        raise UnsupportedModelError(
            f"{path}: tensor {info.name} has unknown ggml type id {info.ggml_type}") from None
    if ggml_type not in GGML_QUANT_SIZES:
        raise UnsupportedModelError(f"{path}: tensor {info.name} has unsupported type {ggml_type.name}")
    return ggml_type


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    return GGUFFile(Path(path))
