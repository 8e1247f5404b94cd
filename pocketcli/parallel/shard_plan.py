"""Which slice of each weight every rank holds, decided from the file's shapes alone (nothing is read yet).

Column-parallel (rows of W, output features): q/k/v by heads, gate/up by FFN columns, embedding and LM head by
vocabulary rows. Row-parallel (slices of each row of W, input features; the ranks' outputs are partial sums):
attention output by heads, down by FFN columns, cut on quant-block boundaries. KV heads are split when there are
at least as many as ranks, else each rank keeps the one KV head its query heads read (replicated across ranks).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gguf_loader.hparams import ModelHParams
from gguf_loader.reader import tensor_nbytes

from .errors import TensorParallelError

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "qwen3moe")
ROWS, COLUMNS = -2, -1  # the split axis of a WeightTensor's logical shape

Span = tuple[int, int]  # [start, stop) along the split axis

# per-layer tensor (name after "blk.N.") -> (axis, what its span follows)
_HEAD_TENSORS = {
    "attn_q.weight": (ROWS, "q"), "attn_k.weight": (ROWS, "kv"), "attn_v.weight": (ROWS, "kv"),
    "attn_q.bias": (COLUMNS, "q"), "attn_k.bias": (COLUMNS, "kv"), "attn_v.bias": (COLUMNS, "kv"),
    "attn_output.weight": (COLUMNS, "q"),
}
# FFN tensors -> the down projection whose quant blocks decide where the FFN columns are cut
_FFN_TENSORS = {
    "ffn_gate.weight": (ROWS, "ffn_down.weight"), "ffn_up.weight": (ROWS, "ffn_down.weight"),
    "ffn_down.weight": (COLUMNS, "ffn_down.weight"),
    "ffn_gate_exps.weight": (ROWS, "ffn_down_exps.weight"), "ffn_up_exps.weight": (ROWS, "ffn_down_exps.weight"),
    "ffn_down_exps.weight": (COLUMNS, "ffn_down_exps.weight"),
}
_VOCAB_TENSORS = ("token_embd.weight", "output.weight")
_REPLICATED_MATRICES = ("ffn_gate_inp.weight",)  # the MoE router: every rank routes every token
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class TensorShard:
    axis: int  # ROWS or COLUMNS
    spans: tuple[Span, ...]  # one per rank


@dataclass(frozen=True)
class ShardPlan:
    tp_size: int
    hparams: ModelHParams  # the whole model's
    shards: dict[str, TensorShard]  # split tensors by name; every other tensor is replicated
    head_spans: tuple[Span, ...]  # query heads of each rank
    kv_head_spans: tuple[Span, ...]  # KV heads of each rank (equal spans on several ranks when replicated)
    vocab_spans: tuple[Span, ...]  # vocabulary rows of each rank

    def rank_hparams(self, rank: int) -> ModelHParams:
        """The hyper-parameters a rank's attention sees: its own query and KV heads (the FFN split is per layer)."""
        (h0, h1), (k0, k1) = self.head_spans[rank], self.kv_head_spans[rank]
        return dataclasses.replace(self.hparams, num_heads=h1 - h0, num_kv_heads=k1 - k0)

    @property
    def partial_sum_names(self) -> frozenset[str]:
        """Row-parallel weights: each rank's product is a partial sum that the ranks all-reduce."""
        return frozenset(name for name, s in self.shards.items() if s.axis == COLUMNS and name.endswith(".weight"))

    @property
    def vocab_names(self) -> frozenset[str]:
        """The vocabulary-parallel tensors (embedding, LM head) of this file."""
        return frozenset(name for name in _VOCAB_TENSORS if name in self.shards)

    @property
    def vocab_width(self) -> int:
        """The widest rank's vocabulary slice: the LM head gather pads every rank to it."""
        return max(stop - start for start, stop in self.vocab_spans)

    def rank_weight_bytes(self, model_file: Any, rank: int) -> int:
        """Bytes of the weights one rank holds (replicated tensors counted in full)."""
        total = 0
        for name, info in model_file.tensor_infos.items():
            shape = list(info.shape)
            if name in self.shards:
                start, stop = self.shards[name].spans[rank]
                shape[self.shards[name].axis] = stop - start
            total += tensor_nbytes(GGMLQuantizationType(info.ggml_type), tuple(shape))
        return total


def make_shard_plan(model_file: Any, hparams: ModelHParams, tp_size: int) -> ShardPlan:
    """The plan for `tp_size` ranks, or a TensorParallelError naming the first tensor that cannot be split."""
    if tp_size < 1:
        raise TensorParallelError(f"--tp must be >= 1, got {tp_size}")
    if hparams.arch not in SUPPORTED_ARCHS:
        raise TensorParallelError(f"tensor parallelism supports {', '.join(SUPPORTED_ARCHS)}; "
                                  f"this model is {hparams.arch}")
    head_spans = _head_spans(hparams.num_heads, tp_size)
    kv_head_spans = _kv_head_spans(hparams.num_heads, hparams.num_kv_heads, tp_size)
    vocab_spans = _even_spans(hparams.vocab_size, tp_size, "token_embd.weight", "vocabulary rows")
    follows = {"q": _scaled(head_spans, hparams.head_dim), "kv": _scaled(kv_head_spans, hparams.head_dim)}
    shards = {}
    for name, info in model_file.tensor_infos.items():
        shard = _tensor_shard(model_file, name, info, follows, vocab_spans, tp_size)
        if shard is not None:
            _check_block_boundaries(name, info, shard)
            _check_not_fp8(model_file, name)
            shards[name] = shard
    return ShardPlan(tp_size, hparams, shards, head_spans, kv_head_spans, vocab_spans)


def _tensor_shard(model_file, name: str, info, follows: dict, vocab_spans, tp_size: int) -> TensorShard | None:
    """None for a replicated tensor. One rank gets whole-tensor "shards", so a one-rank group still runs every
    collective (the single-GPU NCCL check); the engine itself never builds a group for one rank."""
    if name in _VOCAB_TENSORS:
        return TensorShard(ROWS, vocab_spans)
    match = _LAYER_NAME.fullmatch(name)
    if match is None or len(info.shape) == 1 and match.group(2).endswith(".weight"):
        return None  # norms, rope_freqs: small, replicated
    layer, role = match.groups()
    if role in _HEAD_TENSORS:
        axis, span_name = _HEAD_TENSORS[role]
        return TensorShard(axis, follows[span_name])
    if role in _FFN_TENSORS:
        axis, down_role = _FFN_TENSORS[role]
        down_name = f"blk.{layer}.{down_role}"
        return TensorShard(axis, _ffn_spans(down_name, model_file.tensor_infos[down_name], tp_size))
    if role in _REPLICATED_MATRICES:
        return None
    raise TensorParallelError(f"tensor {name} has no tensor-parallel rule (cannot shard this model)")


def _head_spans(num_heads: int, tp_size: int) -> tuple[Span, ...]:
    if num_heads % tp_size:
        raise TensorParallelError(f"tensor blk.0.attn_q.weight: {num_heads} attention heads cannot be split over "
                                  f"{tp_size} ranks (--tp must divide {num_heads})")
    per_rank = num_heads // tp_size
    return tuple((r * per_rank, (r + 1) * per_rank) for r in range(tp_size))


def _kv_head_spans(num_heads: int, num_kv_heads: int, tp_size: int) -> tuple[Span, ...]:
    if num_kv_heads % tp_size == 0:
        per_rank = num_kv_heads // tp_size
        return tuple((r * per_rank, (r + 1) * per_rank) for r in range(tp_size))
    if tp_size % num_kv_heads == 0:  # fewer KV heads than ranks: each rank keeps the KV head of its query heads
        group, heads_per_rank = num_heads // num_kv_heads, num_heads // tp_size
        return tuple(((r * heads_per_rank) // group, (r * heads_per_rank) // group + 1) for r in range(tp_size))
    raise TensorParallelError(f"tensor blk.0.attn_k.weight: {num_kv_heads} KV heads cannot be split over or "
                              f"replicated across {tp_size} ranks (one must divide the other)")


def _ffn_spans(down_name: str, down_info, tp_size: int) -> tuple[Span, ...]:
    """FFN columns cut on the down projection's quant blocks, as evenly as blocks allow."""
    ggml_type = GGMLQuantizationType(down_info.ggml_type)
    block = GGML_QUANT_SIZES[ggml_type][0]
    num_columns = down_info.shape[-1]
    units = _even_spans(num_columns // block, tp_size, down_name, f"{ggml_type.name} blocks of {block} values")
    return tuple((start * block, stop * block) for start, stop in units)


def _even_spans(count: int, tp_size: int, name: str, what: str) -> tuple[Span, ...]:
    if count < tp_size:
        raise TensorParallelError(f"tensor {name}: {count} {what} cannot be split over {tp_size} ranks")
    base, extra = divmod(count, tp_size)
    stops = [0]
    for r in range(tp_size):
        stops.append(stops[-1] + base + (r < extra))
    return tuple(zip(stops[:-1], stops[1:]))


def _scaled(spans: tuple[Span, ...], factor: int) -> tuple[Span, ...]:
    return tuple((start * factor, stop * factor) for start, stop in spans)


def _check_block_boundaries(name: str, info, shard: TensorShard) -> None:
    """A row-parallel slice must start and end on a quant block: blocks are the smallest unit we can cut."""
    if shard.axis != COLUMNS:
        return
    ggml_type = GGMLQuantizationType(info.ggml_type)
    block = GGML_QUANT_SIZES[ggml_type][0]
    for rank, (start, stop) in enumerate(shard.spans):
        if start % block or stop % block:
            raise TensorParallelError(
                f"tensor {name} ({ggml_type.name}, blocks of {block} values) cannot be split over "
                f"{len(shard.spans)} ranks: rank {rank} would hold columns {start}..{stop}")


def _check_not_fp8(model_file, name: str) -> None:
    if model_file.tensor(name).fp8 is not None:  # a view: reads no weight bytes
        raise TensorParallelError(f"tensor {name} is FP8; tensor parallelism does not shard FP8 weights yet")
