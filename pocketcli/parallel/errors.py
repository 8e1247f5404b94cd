"""Errors of tensor parallelism: a shape that cannot be split, a rank that stopped."""


class TensorParallelError(ValueError):
    """A model that cannot be split over the ranks asked for, or a rank that failed (one line, exit code 2)."""
