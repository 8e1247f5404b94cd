"""The one way to build an engine: EngineConfig -> LLMEngine, tensor parallelism attached from outside.

It sits above both the engine and pocketcli.parallel (tests/test_import_graph.py, layer 2.4), so the engine never
imports parallel and no front end passes the rank-group factory itself: generate, bench, serve and chat call this.
"""
from __future__ import annotations

from .config import EngineConfig


def make_engine(config: EngineConfig, model_file=None):
    """The engine for `config`; with --tp N > 1 its ranks 1..N-1 start as worker processes
    (pocketcli.parallel.make_rank_group); with --spec draft the draft model's engine is built here too, from
    config.draft_config (one rank, no speculation of its own)."""
    from .engine.llm_engine import LLMEngine
    from .parallel import make_rank_group

    return LLMEngine(config, model_file=model_file, rank_group_factory=make_rank_group,
                     draft_engine_factory=make_engine)
