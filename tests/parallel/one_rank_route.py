"""A one-rank tensor-parallel model swapped into an ordinary engine: every collective runs (over one rank, so
it changes nothing) and the output must equal the plain engine's exactly. Shared by the CPU test and the
single-GPU NCCL check in scripts/gpu_check.sh."""
from __future__ import annotations

from pocketcli.parallel.rank_model import make_rank_model
from pocketcli.parallel.shard_plan import make_shard_plan
from tests.parallel.tp_engines import greedy_batch, make_engine

PROMPTS = [[1, 40, 50, 60, 70, 80, 90], [1, 300, 21, 22]]


def outputs(engine) -> dict:
    return {"batched": greedy_batch(engine, PROMPTS, 6), "alone": greedy_batch(engine, PROMPTS[:1], 6),
            "logits": engine.score(PROMPTS[0])}


def one_rank_outputs(path, comm, backend: str = "cpu") -> tuple[dict, float]:
    """The outputs through the one-rank TP model, and the seconds its collectives took."""
    engine = make_engine(path, 1, backend=backend)
    plan = make_shard_plan(engine.model_file, engine.hparams, 1)
    model = make_rank_model(engine.model_file, engine.hparams, plan, 0, engine.model.ops, comm)
    engine.model = engine.runner.model = model
    return outputs(engine), model.ops.collective_seconds
