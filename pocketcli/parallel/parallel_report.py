"""What `pocket bench --tp N` adds: each rank's weight bytes and the share of rank 0's forward time spent in
all-reduces and the LM-head gather (on CPU ranks this includes waiting for the slowest rank)."""
from __future__ import annotations


def parallel_report(engine) -> dict | None:
    group = getattr(engine, "rank_group", None)
    if group is None:
        return None
    forward_seconds = engine.runner.forward_seconds
    share = group.collective_seconds / forward_seconds if forward_seconds else 0.0
    return {"tp_size": group.tp_size, "rank_weight_bytes": group.rank_weight_bytes(),
            "collective_seconds": round(group.collective_seconds, 4), "forward_seconds": round(forward_seconds, 4),
            "all_reduce_time_share": round(share, 4)}


def reset_parallel_counters(engine) -> None:
    """Start the shares afresh (after a warm-up, whose first steps load each rank's kernels)."""
    engine.rank_group.model.ops.collective_seconds = 0.0
    engine.runner.forward_seconds = 0.0


def format_parallel_report(report: dict) -> list[str]:
    weights = ", ".join(f"rank {rank} {size / 2**20:.1f} MiB" for rank, size in enumerate(report["rank_weight_bytes"]))
    return [f"tensor parallel: {report['tp_size']} ranks; weights {weights}",
            f"all-reduce + gather: {100 * report['all_reduce_time_share']:.1f}% of rank 0's forward time "
            f"({report['collective_seconds']:.2f} of {report['forward_seconds']:.2f} s)"]
