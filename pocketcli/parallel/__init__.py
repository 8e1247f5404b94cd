"""Tensor parallelism applied from outside the model: shards of every weight, one process per rank.

`ShardPlan` decides which slice of which tensor each rank holds (checked from the file's shapes before anything
loads), `ShardedModelFile` hands a model those slices, `TensorParallelOps` adds the all-reduces and gathers, and
`RankGroup` runs ranks 1..n-1 as worker processes that follow rank 0 step by step. The model code is unchanged.
"""
from .errors import TensorParallelError


def make_rank_group(model_file, hparams, config, ops):
    """LLMEngine's rank_group_factory: rank 0's RankGroup for --tp N (imported only when N > 1)."""
    from .rank_group import RankGroup

    return RankGroup(model_file, hparams, config, ops)


__all__ = ["TensorParallelError", "make_rank_group"]
