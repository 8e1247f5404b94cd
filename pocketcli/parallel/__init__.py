"""Tensor parallelism applied from outside the model: shards of every weight, one process per rank.

`ShardPlan` decides which slice of which tensor each rank holds (checked from the file's shapes before anything
loads), `ShardedModelFile` hands a model those slices, `TensorParallelOps` adds the all-reduces and gathers, and
`RankGroup` runs ranks 1..n-1 as worker processes that follow rank 0 step by step. The model code is unchanged.
"""
from .errors import TensorParallelError

__all__ = ["TensorParallelError"]
