"""Opening a model from a path: a GGUF file, or a Hugging Face directory (config.json + safetensors)."""
from __future__ import annotations

import os

from gguf_loader import GGUFFile, open_gguf
from gguf_loader.hf_checkpoint import HFCheckpoint, open_hf_checkpoint


def open_model_file(path: str | os.PathLike) -> GGUFFile | HFCheckpoint:
    """The model at `path`, read lazily (weights stay memory-mapped)."""
    if os.path.isdir(path):
        return open_hf_checkpoint(path)
    return open_gguf(path)


def make_tokenizer(model_file: GGUFFile | HFCheckpoint):
    """The tokenizer that belongs to the model: tokenizer.json for HF directories, else the GGUF vocabulary."""
    if isinstance(model_file, HFCheckpoint):
        from .tokenizer.hf_tokenizer import HFTokenizer

        return HFTokenizer.from_dir(model_file.path)
    from .tokenizer import Tokenizer

    return Tokenizer.from_gguf_metadata(model_file.metadata)


def vocab_size_of(model_file: GGUFFile | HFCheckpoint) -> int:
    """The model's vocabulary size: its token embedding's rows."""
    return model_file.tensor_infos["token_embd.weight"].shape[0]
