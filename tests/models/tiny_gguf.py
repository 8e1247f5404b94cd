"""Tiny random-weight GGUF models that llama.cpp loads and runs, one per architecture.

`write_tiny_model(path, arch, seed, quant)` is deterministic: the same arguments give the same tensors
(checked by `tensor_digest`), so a test can rebuild the exact model a committed golden was made from.
Tensor names, shapes and metadata keys follow llama.cpp (src/models/<arch>.cpp, gguf-py constants).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import gguf

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")

# quant name -> (ggml type of the 2-D weights, general.file_type); 1-D norms and biases always stay F32
QUANTS = {
    "F32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "F16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "BF16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "Q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "Q5_0": (gguf.GGMLQuantizationType.Q5_0, gguf.LlamaFileType.MOSTLY_Q5_0),
    "Q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}

BOS_ID, EOS_ID, UNK_ID = 1, 2, 0
NUM_BYTE_TOKENS = 256
FIRST_BYTE_ID = 3


@dataclass(frozen=True)
class TinyConfig:
    arch: str
    n_layer: int
    rms_eps: float
    rope_freq_base: float
    tied_output: bool
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_vocab: int = 320
    n_ctx_train: int = 2048
    writes_head_dim: bool = False  # writes attention.key_length / value_length
    has_qkv_bias: bool = False  # qwen2
    has_qk_norm: bool = False  # qwen3, gemma3: per-head RMSNorm on q and k
    has_post_norms: bool = False  # gemma3: post_attention_norm / post_ffw_norm
    post_norm_gain: float = 1.0  # > 1 so the layers, not the tied embedding, decide gemma3's argmax
    sliding_window: int = 0  # gemma3: every 6th layer (il % 6 == 5) is global, the rest slide

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {ARCHS}")
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head must be a multiple of n_head_kv")
        if not self.writes_head_dim and self.n_head * self.head_dim != self.n_embd:
            raise ValueError("without key_length, llama.cpp derives head_dim = n_embd / n_head")

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim


# qwen3 and gemma3 use head_dim 32 so n_head * head_dim (128) != n_embd (64), as in the real models
TINY_CONFIGS = {
    "llama": TinyConfig("llama", n_layer=3, rms_eps=1e-5, rope_freq_base=10000.0, tied_output=False),
    "qwen2": TinyConfig("qwen2", n_layer=3, rms_eps=1e-6, rope_freq_base=1000000.0, tied_output=True,
                        has_qkv_bias=True),
    "qwen3": TinyConfig("qwen3", n_layer=3, rms_eps=1e-6, rope_freq_base=1000000.0, tied_output=False,
                        head_dim=32, writes_head_dim=True, has_qk_norm=True),
    "gemma3": TinyConfig("gemma3", n_layer=7, rms_eps=1e-6, rope_freq_base=1000000.0, tied_output=True,
                         head_dim=32, writes_head_dim=True, has_qk_norm=True, has_post_norms=True,
                         post_norm_gain=3.0, sliding_window=4),
}


def write_tiny_model(path, arch: str, seed: int = 0, quant: str = "F32", extra_metadata: dict | None = None) -> Path:
    """Write a tiny random-weight GGUF for `arch` to `path` and return the path; extra_metadata: more keys
    (float values as FLOAT32, int values as INT32)."""
    if quant not in QUANTS:
        raise ValueError(f"unknown quant {quant!r}; expected one of {tuple(QUANTS)}")
    cfg = TINY_CONFIGS[arch]
    path = Path(path)
    writer = gguf.GGUFWriter(path, arch)
    _add_hparams(writer, cfg, quant)
    for key, value in (extra_metadata or {}).items():
        (writer.add_float32 if isinstance(value, float) else writer.add_int32)(key, value)
    _add_vocab(writer, cfg)
    weight_type = QUANTS[quant][0]
    for name, array in make_tensors(cfg, seed).items():
        _add_tensor(writer, name, array, weight_type)
    finish_gguf(writer)
    return path


def finish_gguf(writer: gguf.GGUFWriter) -> None:
    """Write what was added to `writer` (header, metadata, tensors) to its file and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def make_tensors(cfg: TinyConfig, seed: int) -> dict[str, np.ndarray]:
    """All tensors as float32 numpy arrays in GGUF order; numpy shape is (out, in) = ggml ne reversed."""
    rng = np.random.default_rng(seed)

    def linear(n_out: int, n_in: int) -> np.ndarray:
        # 1/sqrt(fan_in) keeps activations O(1) so attention and logits are neither flat nor saturated
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def norm(n: int, gain: float = 1.0) -> np.ndarray:
        return (gain * (1.0 + 0.1 * rng.standard_normal(n))).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (0.2 * rng.standard_normal(n)).astype(np.float32)

    # std 0.25: tied logits (normed hidden . embedding row) then have std ~2, peaked but not one-hot
    tensors = {"token_embd.weight": (0.25 * rng.standard_normal((cfg.n_vocab, cfg.n_embd))).astype(np.float32)}
    for il in range(cfg.n_layer):
        tensors.update(_layer_tensors(cfg, il, linear, norm, bias))
    tensors["output_norm.weight"] = norm(cfg.n_embd)
    if not cfg.tied_output:
        tensors["output.weight"] = 2.0 * linear(cfg.n_vocab, cfg.n_embd)
    return tensors


def _layer_tensors(cfg: TinyConfig, il: int, linear, norm, bias) -> dict[str, np.ndarray]:
    p = f"blk.{il}."
    t = {p + "attn_norm.weight": norm(cfg.n_embd),
         p + "attn_q.weight": linear(cfg.q_dim, cfg.n_embd),
         p + "attn_k.weight": linear(cfg.kv_dim, cfg.n_embd),
         p + "attn_v.weight": linear(cfg.kv_dim, cfg.n_embd)}
    if cfg.has_qkv_bias:
        t[p + "attn_q.bias"] = bias(cfg.q_dim)
        t[p + "attn_k.bias"] = bias(cfg.kv_dim)
        t[p + "attn_v.bias"] = bias(cfg.kv_dim)
    if cfg.has_qk_norm:
        t[p + "attn_q_norm.weight"] = norm(cfg.head_dim)
        t[p + "attn_k_norm.weight"] = norm(cfg.head_dim)
    t[p + "attn_output.weight"] = linear(cfg.n_embd, cfg.q_dim)
    if cfg.has_post_norms:
        t[p + "post_attention_norm.weight"] = norm(cfg.n_embd, cfg.post_norm_gain)
    t[p + "ffn_norm.weight"] = norm(cfg.n_embd)
    t[p + "ffn_gate.weight"] = linear(cfg.n_ff, cfg.n_embd)
    t[p + "ffn_up.weight"] = linear(cfg.n_ff, cfg.n_embd)
    t[p + "ffn_down.weight"] = linear(cfg.n_embd, cfg.n_ff)
    if cfg.has_post_norms:
        t[p + "post_ffw_norm.weight"] = norm(cfg.n_embd, cfg.post_norm_gain)
    return t


def _add_tensor(writer: gguf.GGUFWriter, name: str, array: np.ndarray, weight_type) -> None:
    if array.ndim == 1 or weight_type == gguf.GGMLQuantizationType.F32:
        writer.add_tensor(name, array)
    elif weight_type == gguf.GGMLQuantizationType.F16:
        writer.add_tensor(name, array.astype(np.float16))
    else:
        writer.add_tensor(name, gguf.quants.quantize(array, weight_type), raw_dtype=weight_type)


def _add_hparams(writer: gguf.GGUFWriter, cfg: TinyConfig, quant: str) -> None:
    writer.add_name(f"tiny-{cfg.arch}")
    writer.add_context_length(cfg.n_ctx_train)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_layer_norm_rms_eps(cfg.rms_eps)
    writer.add_rope_freq_base(cfg.rope_freq_base)
    if cfg.arch == "llama":
        writer.add_rope_dimension_count(cfg.head_dim)
        writer.add_vocab_size(cfg.n_vocab)
    if cfg.writes_head_dim:
        writer.add_key_length(cfg.head_dim)
        writer.add_value_length(cfg.head_dim)
    if cfg.sliding_window:
        writer.add_sliding_window(cfg.sliding_window)
    writer.add_file_type(QUANTS[quant][1])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def tiny_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style vocab: <unk> <s> </s>, 256 byte tokens, then short word pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(NUM_BYTE_TOKENS)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * NUM_BYTE_TOKENS
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"] + list(letters) + ["\u2581" + c for c in letters]
    pieces += [a + b for a in letters for b in letters]
    pieces = pieces[: n_vocab - len(tokens)]
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(pieces))]
    types += [gguf.TokenType.NORMAL] * len(pieces)
    return tokens + pieces, scores, [int(t) for t in types]


def _add_vocab(writer: gguf.GGUFWriter, cfg: TinyConfig) -> None:
    tokens, scores, types = tiny_vocab(cfg.n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(cfg.arch != "gemma3")


def tensor_digest(path) -> str:
    """sha256 over (name, type, shape, raw bytes) of every tensor: identical weights <=> identical digest."""
    reader = gguf.GGUFReader(path)
    h = hashlib.sha256()
    for t in reader.tensors:
        h.update(f"{t.name}|{t.tensor_type.name}|{list(map(int, t.shape))}|".encode())
        h.update(np.ascontiguousarray(t.data).tobytes())
    return h.hexdigest()
