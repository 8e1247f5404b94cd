"""A GGUF with random weights and the exact tensor shapes of a real model, for benchmarks at the sizes people run.

    python bench/synthetic_model.py --shape llama-3.2-1b --mix q4_k_m        # prints the path (cached)
    python bench/compare_llamacpp.py -m "$(python bench/synthetic_model.py --shape llama-3.2-1b --mix q4_k_m)"

Shapes: Llama-3.2-1B (16 layers, 2048 wide, 8192 FFN, tied 128256-token embedding) and Llama-3.1-8B (32 layers,
4096 wide, 14336 FFN, its own output matrix), llama3 rope scaling (rope_freqs), GQA 32/8 heads. Mixes as
llama.cpp's quantizer makes them: q4_k_m (Q4_K; Q6_K for the output matrix, and for attn_v and ffn_down in the
layers llama.cpp's use_more_bits picks), q4_0 (Q4_0, output Q6_K), q8_0 (all Q8_0). Q4_0 and Q8_0 are quantized
from Gaussian weights with gguf-py (gguf.quants); gguf-py cannot quantize K-quants, so Q4_K and Q6_K get random
blocks written directly, with scales set so that weights stay about as large as a trained model's (|w| ~ 0.02).
The vocabulary is SmolLM2's (a real GPT-2 BPE vocabulary, from the chat default model) padded with unused control
tokens to 128256, so llama.cpp and PocketLLM both load and tokenize it. Files go to the user cache dir (never the
repository); each tensor is written as soon as it is made (peak memory: one tensor).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WEIGHT_STD = 0.02  # Gaussian weights quantized with gguf-py, and about the size of the random K-quant values
QUANTIZE_ROWS = 2048  # rows quantized at a time: the float32 copy of a chunk, not of the tensor


@dataclass(frozen=True)
class Shape:
    name: str
    num_layers: int
    hidden: int
    ffn: int
    num_heads: int
    num_kv_heads: int
    tied_embedding: bool
    vocab: int = 128256
    context_length: int = 131072
    rope_theta: float = 500000.0
    rope_scaling: tuple[float, float, float, int] = (32.0, 1.0, 4.0, 8192)  # factor, low, high freq, original ctx

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads


SHAPES = {
    "llama-3.2-1b": Shape("Llama-3.2-1B", 16, 2048, 8192, 32, 8, tied_embedding=True),
    "llama-3.1-8b": Shape("Llama-3.1-8B", 32, 4096, 14336, 32, 8, tied_embedding=False,
                          rope_scaling=(8.0, 1.0, 4.0, 8192)),
}
FILE_TYPES = {"q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def use_more_bits(index: int, count: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v / ffn_down get more bits in the _M mixes."""
    return index < count // 8 or index >= 7 * count // 8 or (index - count // 8) % 3 == 2


def tensor_type(name: str, layer: int | None, shape: Shape, mix: str) -> QT:
    """The type llama.cpp's quantizer gives this tensor under `mix` (llama_tensor_get_type, for Llama)."""
    is_output = name == "output.weight" or (name == "token_embd.weight" and shape.tied_embedding)
    if mix == "q8_0":
        return QT.Q8_0
    if is_output:
        return QT.Q6_K
    if mix == "q4_0":
        return QT.Q4_0
    if layer is not None and name.endswith(("attn_v.weight", "ffn_down.weight")) \
            and use_more_bits(layer, shape.num_layers):
        return QT.Q6_K
    return QT.Q4_K


def matrices(shape: Shape) -> list[tuple[str, int | None, tuple[int, int]]]:
    """(name, layer, (rows, cols)) of every 2-D weight, in llama.cpp's order."""
    kv_width = shape.num_kv_heads * shape.head_dim
    out = [("token_embd.weight", None, (shape.vocab, shape.hidden))]
    for layer in range(shape.num_layers):
        p = f"blk.{layer}."
        out += [(p + "attn_q.weight", layer, (shape.hidden, shape.hidden)),
                (p + "attn_k.weight", layer, (kv_width, shape.hidden)),
                (p + "attn_v.weight", layer, (kv_width, shape.hidden)),
                (p + "attn_output.weight", layer, (shape.hidden, shape.hidden)),
                (p + "ffn_gate.weight", layer, (shape.ffn, shape.hidden)),
                (p + "ffn_up.weight", layer, (shape.ffn, shape.hidden)),
                (p + "ffn_down.weight", layer, (shape.hidden, shape.ffn))]
    if not shape.tied_embedding:
        out.append(("output.weight", None, (shape.vocab, shape.hidden)))
    return out


def vectors(shape: Shape) -> list[tuple[str, np.ndarray]]:
    """The float32 tensors: norms (ones) and llama3's rope frequency factors."""
    ones = np.ones(shape.hidden, np.float32)
    out = [("rope_freqs.weight", llama3_rope_factors(shape))]
    for layer in range(shape.num_layers):
        out += [(f"blk.{layer}.attn_norm.weight", ones), (f"blk.{layer}.ffn_norm.weight", ones)]
    return out + [("output_norm.weight", ones)]


def llama3_rope_factors(shape: Shape) -> np.ndarray:
    """The divisor of each rope frequency (transformers' _compute_llama3_parameters, as llama.cpp stores it)."""
    factor, low_freq_factor, high_freq_factor, original = shape.rope_scaling
    freqs = shape.rope_theta ** -(np.arange(0, shape.head_dim, 2, dtype=np.float64) / shape.head_dim)
    wavelen = 2 * math.pi / freqs
    low_wavelen, high_wavelen = original / low_freq_factor, original / high_freq_factor
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    factors = np.where(wavelen < high_wavelen, 1.0,
                       np.where(wavelen > low_wavelen, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return factors.astype(np.float32)


def random_matrix(rows: int, cols: int, ggml_type: QT, rng: np.random.Generator) -> np.ndarray:
    """uint8 [rows, bytes per row] of valid `ggml_type` blocks."""
    if ggml_type in (QT.Q4_0, QT.Q8_0):
        return quantized_gaussian(rows, cols, ggml_type, rng)
    return random_k_blocks(rows, cols, ggml_type, rng)


def quantized_gaussian(rows: int, cols: int, ggml_type: QT, rng: np.random.Generator) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
    out = np.empty((rows, cols // block_size * type_size), np.uint8)
    for first in range(0, rows, QUANTIZE_ROWS):
        chunk = rng.standard_normal((min(QUANTIZE_ROWS, rows - first), cols), dtype=np.float32) * WEIGHT_STD
        out[first:first + len(chunk)] = gguf.quants.quantize(chunk, ggml_type)
    return out


def random_k_blocks(rows: int, cols: int, ggml_type: QT, rng: np.random.Generator) -> np.ndarray:
    """Random Q4_K / Q6_K blocks (random quants and sub-block scales) whose f16 super-block scales keep
    |w| about WEIGHT_STD: Q4_K w = d * sc * q - dmin * m (sc, m < 64, q < 16); Q6_K w = d * sc * (q - 32)
    (sc int8, q < 64)."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
    num_blocks = rows * (cols // block_size)
    blocks = np.frombuffer(rng.bytes(num_blocks * type_size), np.uint8).reshape(num_blocks, type_size).copy()
    if ggml_type == QT.Q4_K:  # d, dmin first
        blocks[:, 0:2] = f16_bytes(2 * WEIGHT_STD / (32 * 15))
        blocks[:, 2:4] = f16_bytes(WEIGHT_STD / 32)
    elif ggml_type == QT.Q6_K:  # d last
        blocks[:, -2:] = f16_bytes(WEIGHT_STD / (64 * 32))
    else:
        raise ValueError(f"no random blocks for {ggml_type.name}")
    return blocks.reshape(rows, -1)


def f16_bytes(value: float) -> np.ndarray:
    return np.array([value], np.float16).view(np.uint8)


def donor_tokenizer(path: str) -> dict:
    """The tokenizer.* keys of a GGUF with a BPE vocabulary (their values, with their GGUF value types)."""
    reader = gguf.GGUFReader(path)
    keys = {}
    for field in reader.fields.values():
        if field.name.startswith("tokenizer.") and field.name != "tokenizer.chat_template":
            keys[field.name] = field.contents()
    return keys


def add_tokenizer(writer: gguf.GGUFWriter, donor: dict, vocab_size: int) -> None:
    """The donor's vocabulary (BPE merges or SentencePiece scores) padded with unused control tokens to the
    model's vocab size."""
    tokens, types = list(donor["tokenizer.ggml.tokens"]), list(donor["tokenizer.ggml.token_type"])
    if len(tokens) > vocab_size:
        raise ValueError(f"the donor vocabulary ({len(tokens)}) is larger than the model's ({vocab_size})")
    padding = vocab_size - len(tokens)
    writer.add_tokenizer_model(donor["tokenizer.ggml.model"])
    writer.add_tokenizer_pre(donor.get("tokenizer.ggml.pre", "default"))
    writer.add_token_list(tokens + [f"<|synthetic_reserved_{i}|>" for i in range(padding)])
    writer.add_token_types(types + [gguf.TokenType.CONTROL] * padding)
    if "tokenizer.ggml.scores" in donor:
        writer.add_token_scores(list(donor["tokenizer.ggml.scores"]) + [0.0] * padding)
    if "tokenizer.ggml.merges" in donor:
        writer.add_token_merges(donor["tokenizer.ggml.merges"])
    for key in ("bos", "eos", "unknown", "padding"):
        value = donor.get(f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            writer.add_uint32(f"tokenizer.ggml.{key}_token_id", int(value))
    writer.add_add_bos_token(False)


def add_hparams(writer: gguf.GGUFWriter, shape: Shape, mix: str) -> None:
    writer.add_name(f"{shape.name} synthetic {mix.upper()} (random weights)")
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.num_layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.num_heads)
    writer.add_head_count_kv(shape.num_kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(FILE_TYPES[mix])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def write_model(path: Path, shape: Shape, mix: str, tokenizer_gguf: str, seed: int = 0) -> Path:
    """Writes the GGUF: header and tensor infos first, then each tensor as it is made."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(partial, "llama")
    add_hparams(writer, shape, mix)
    add_tokenizer(writer, donor_tokenizer(tokenizer_gguf), shape.vocab)
    plan = [(name, rows, cols, tensor_type(name, layer, shape, mix)) for name, layer, (rows, cols) in matrices(shape)]
    floats = vectors(shape)
    for name, rows, cols, ggml_type in plan:
        block_size, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
        writer.add_tensor_info(name, (rows, cols * type_size // block_size), np.dtype(np.uint8),
                               rows * cols // block_size * type_size, raw_dtype=ggml_type)
    for name, values in floats:
        writer.add_tensor_info(name, values.shape, values.dtype, values.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, (name, rows, cols, ggml_type) in enumerate(plan):
        if sys.stderr.isatty():
            print(f"\r{index + 1}/{len(plan)} {name} {ggml_type.name} [{rows}, {cols}]".ljust(70), end="",
                  file=sys.stderr, flush=True)
        writer.write_tensor_data(random_matrix(rows, cols, ggml_type, rng))
    for _, values in floats:
        writer.write_tensor_data(values)
    writer.close()
    print(f"\rwrote {path.name}".ljust(70), file=sys.stderr)
    partial.replace(path)
    return path


def weight_bytes_per_token(path: Path) -> int:
    """Bytes of weights one decode step reads: every matrix but the embedding, of which it reads one row
    (unless the embedding is also the output matrix, as in Llama-3.2-1B)."""
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    total = sum(int(t.n_bytes) for name, t in tensors.items() if name != "token_embd.weight")
    embedding = tensors["token_embd.weight"]
    tied = "output.weight" not in tensors
    return total + (int(embedding.n_bytes) if tied else int(embedding.n_bytes) // int(embedding.shape[-1]))


def default_path(shape_name: str, mix: str) -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("pocketllm", appauthor=False)) / "synthetic" / f"{shape_name}-{mix}.gguf"


def default_tokenizer_gguf() -> str:
    """SmolLM2-135M-Instruct's GGUF (the chat default model; fetched once if it is not here)."""
    from pocketcli.commands.models_cmd import default_model
    from pocketcli.registry import resolve_model

    return resolve_model(default_model(for_chat=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    parser.add_argument("--mix", choices=sorted(FILE_TYPES), default="q4_k_m")
    parser.add_argument("-o", "--output", default=None, help="GGUF path (default: the user cache dir)")
    parser.add_argument("--tokenizer-gguf", default=None, help="GGUF whose BPE vocabulary to use (default SmolLM2)")
    parser.add_argument("--force", action="store_true", help="write it again even if the file exists")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = Path(args.output) if args.output else default_path(args.shape, args.mix)
    if args.force or not path.is_file():
        write_model(path, SHAPES[args.shape], args.mix, args.tokenizer_gguf or default_tokenizer_gguf(), args.seed)
    print(f"{path.stat().st_size / 2**30:.2f} GiB, {weight_bytes_per_token(path) / 2**20:.0f} MiB of weights read "
          f"per decoded token", file=sys.stderr)
    print(path)


if __name__ == "__main__":
    main()
