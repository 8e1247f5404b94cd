"""Memory-mapped safetensors files (single or sharded): header parsed by hand, tensors as zero-copy byte views.

Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}},
then the data section; offsets are relative to its start.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ModelFileError, UnsupportedModelError

# safetensors dtype -> bytes per element (only the ones we can run)
DTYPE_SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}
MAX_HEADER_BYTES = 100 * 2**20
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


@dataclass(frozen=True)
class SafetensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: "SafetensorsFile"
    begin: int  # byte offset in the file (data section start already added)
    nbytes: int


class SafetensorsFile:
    """One mapped .safetensors file: `infos` (name -> SafetensorInfo) and `raw(info)` (uint8 view)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        if not os.path.isfile(self.path):
            raise ModelFileError(f"safetensors file not found: {self.path}")
        self.file_size = os.path.getsize(self.path)
        if self.file_size < 8:
            raise ModelFileError(f"{self.path}: not a safetensors file (too small)")
        self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        header_len = struct.unpack("<Q", bytes(self._mmap[:8]))[0]
        if header_len > min(MAX_HEADER_BYTES, self.file_size - 8):
            raise ModelFileError(f"{self.path}: corrupt safetensors header (length {header_len})")
        try:
            header = json.loads(bytes(self._mmap[8:8 + header_len]))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ModelFileError(f"{self.path}: corrupt safetensors header (not JSON)") from None
        if not isinstance(header, dict):
            raise ModelFileError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        data_start = 8 + header_len
        self.infos = {name: self._parse_entry(name, entry, data_start) for name, entry in header.items()}

    def _parse_entry(self, name: str, entry, data_start: int) -> SafetensorInfo:
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelFileError(f"{self.path}: corrupt safetensors header entry for {name}") from None
        if dtype not in DTYPE_SIZES:
            raise UnsupportedModelError(f"{self.path}: tensor {name} has dtype {dtype} "
                                        f"(supported: {', '.join(DTYPE_SIZES)})")
        expected = int(np.prod(shape, dtype=np.int64)) * DTYPE_SIZES[dtype]
        if end - begin != expected or begin < 0:
            raise ModelFileError(f"{self.path}: header lies about tensor {name}: shape {list(shape)} {dtype} "
                                 f"needs {expected} bytes, offsets give {end - begin}")
        if data_start + end > self.file_size:
            raise ModelFileError(f"{self.path}: file is truncated (tensor {name} ends at byte {data_start + end}, "
                                 f"file has {self.file_size})")
        return SafetensorInfo(name, dtype, shape, self, data_start + begin, expected)

    def raw(self, info: SafetensorInfo) -> np.ndarray:
        """The tensor's bytes, uint8 [nbytes], zero-copy."""
        return self._mmap[info.begin:info.begin + info.nbytes]


def safetensors_files(model_dir: Path) -> list[Path]:
    """The shard files of a model directory: from the index if there is one, else model.safetensors (or *.safetensors)."""
    index_path = model_dir / INDEX_FILE
    if index_path.exists():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError):
            raise ModelFileError(f"{index_path}: not a valid safetensors index (no weight_map)") from None
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (model_dir / s).is_file()]
        if missing:
            raise ModelFileError(f"{model_dir}: missing shard {missing[0]} (listed in {INDEX_FILE})")
        return [model_dir / s for s in shards]
    if (model_dir / SINGLE_FILE).is_file():
        return [model_dir / SINGLE_FILE]
    found = sorted(model_dir.glob("*.safetensors"))
    if not found:
        raise ModelFileError(f"{model_dir}: no *.safetensors weights in this directory")
    return found


def open_safetensors_dir(model_dir: Path) -> tuple[dict[str, SafetensorInfo], list[SafetensorsFile]]:
    """All tensors of a model directory by HF name, and the opened files."""
    files = [SafetensorsFile(p) for p in safetensors_files(model_dir)]
    infos: dict[str, SafetensorInfo] = {}
    for f in files:
        infos.update(f.infos)
    return infos, files
