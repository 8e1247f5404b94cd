"""A tiny random llama GGUF with an 8-token vocabulary: few enough outcomes per position for a chi-square test
over sampled tokens (the usual tiny models carry 320 tokens for their byte-level vocabularies)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf

from tests.models.tiny_gguf import (BOS_ID, EOS_ID, TINY_CONFIGS, UNK_ID, _add_hparams, _add_tensor, finish_gguf,
                                    make_tensors)

TOKENS = ["<unk>", "<s>", "</s>", "\u2581a", "\u2581b", "\u2581c", "\u2581d", "\u2581e"]
VOCAB_SIZE = len(TOKENS)


def write_tiny_vocab_model(path, seed: int = 0) -> Path:
    cfg = dataclasses.replace(TINY_CONFIGS["llama"], n_vocab=VOCAB_SIZE)
    path = Path(path)
    writer = gguf.GGUFWriter(path, "llama")
    _add_hparams(writer, cfg, "F32")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_scores([0.0, 0.0, 0.0] + [-float(i) for i in range(VOCAB_SIZE - 3)])
    writer.add_token_types([int(gguf.TokenType.UNKNOWN)] + [int(gguf.TokenType.CONTROL)] * 2
                           + [int(gguf.TokenType.NORMAL)] * (VOCAB_SIZE - 3))
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    for name, array in make_tensors(cfg, seed).items():
        _add_tensor(writer, name, array, gguf.GGMLQuantizationType.F32)
    finish_gguf(writer)
    return path
