"""One rank's model: the architecture's own class, built from the rank's shards and run through TP ops."""
from __future__ import annotations

from typing import Any

from gguf_loader.hparams import ModelHParams

from ..models import make_model
from ..models.base import DecoderModel
from .parallel_ops import TensorParallelOps
from .shard_plan import ShardPlan
from .sharded_model_file import ShardedModelFile


def make_rank_model(model_file: Any, hparams: ModelHParams, plan: ShardPlan, rank: int, ops: Any,
                    comm: Any) -> DecoderModel:
    model = make_model(ShardedModelFile(model_file, plan, rank), hparams, TensorParallelOps(ops, comm, plan, rank))
    scale = model.attention_scale()  # from the whole model's heads (Gemma 3 27B scales by hidden / heads)
    model.attention_scale = lambda: scale
    model.hparams = plan.rank_hparams(rank)  # attention reshapes to this rank's heads
    return model

