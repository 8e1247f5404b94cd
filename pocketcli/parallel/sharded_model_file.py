"""A model file as one rank sees it: `tensor(name)` is that rank's shard, so the model code loads it unchanged."""
from __future__ import annotations

from typing import Any

from gguf_loader import WeightTensor

from .shard_plan import ROWS, ShardPlan
from .weight_shard import slice_columns, slice_rows


class ShardedModelFile:
    def __init__(self, model_file: Any, plan: ShardPlan, rank: int):
        self.model_file, self.plan, self.rank = model_file, plan, rank

    def tensor(self, name: str) -> WeightTensor:
        full = self.model_file.tensor(name)
        shard = self.plan.shards.get(name)
        if shard is None:
            return full
        start, stop = shard.spans[self.rank]
        return slice_rows(full, start, stop) if shard.axis == ROWS else slice_columns(full, start, stop)

    def __getattr__(self, name: str) -> Any:  # path, metadata, has_tensor, tensor_infos: the whole file's
        return getattr(self.model_file, name)
