"""Prometheus metrics for one app (its own registry, so several apps in one process never collide)."""
from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..engine.engine_loop import EngineStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STEP_BUCKETS = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12)


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("pocket_requests", "HTTP API requests", ["endpoint", "status"], registry=registry)
        self.finished = Counter("pocket_request_finished", "Finished choices by reason", ["finish_reason"],
                                registry=registry)
        self.prompt_tokens = Counter("pocket_prompt_tokens", "Prompt tokens processed", registry=registry)
        self.generation_tokens = Counter("pocket_generation_tokens", "Tokens generated", registry=registry)
        self.ttft = Histogram("pocket_time_to_first_token_seconds", "Time from request to first token",
                              buckets=LATENCY_BUCKETS, registry=registry)
        self.itl = Histogram("pocket_inter_token_latency_seconds", "Time between streamed tokens",
                             buckets=LATENCY_BUCKETS, registry=registry)
        self.e2e = Histogram("pocket_e2e_request_latency_seconds", "Time from request to last token",
                             buckets=LATENCY_BUCKETS, registry=registry)
        # the engine's steps as the server runs them: with the HTTP work and the clients beside them (compare with
        # bench/profile_serve_step.py, the same steps alone); a step's sequences / its tokens give the batch
        self.step_seconds = Histogram("pocket_engine_step_seconds",
                                      "Wall time of one engine step (schedule, forward, logits, sampling) that gave "
                                      "sequences tokens", buckets=STEP_BUCKETS, registry=registry)
        self.step_sequences = Counter("pocket_engine_step_sequences",
                                      "Sequences given tokens, summed over engine steps (/ steps: the mean batch)",
                                      registry=registry)
        self.step_tokens = Counter("pocket_engine_step_tokens", "Tokens given to sequences by engine steps",
                                   registry=registry)
        self.running = Gauge("pocket_num_requests_running", "Sequences running in the engine", registry=registry)
        self.waiting = Gauge("pocket_num_requests_waiting", "Sequences waiting in the engine", registry=registry)
        self.blocks_used = Gauge("pocket_kv_blocks_used", "KV cache blocks held by sequences", registry=registry)
        self.blocks_free = Gauge("pocket_kv_blocks_free", "KV cache blocks free (cached or empty)",
                                 registry=registry)
        self.hit_rate = Gauge("pocket_prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / looked up",
                              registry=registry)
        self.prefix_queries = Gauge("pocket_prefix_cache_queries_tokens", "Prompt tokens looked up in the cache",
                                    registry=registry)
        self.prefix_hits = Gauge("pocket_prefix_cache_hits_tokens", "Prompt tokens found in the cache",
                                 registry=registry)
        self.spec = {name: Gauge(f"pocket_spec_{name}", help_text, registry=registry) for name, help_text in (
            ("draft_tokens", "Speculative draft tokens proposed"),
            ("accepted_tokens", "Speculative draft tokens accepted (bonus/correction token not counted)"),
            ("rounds", "Speculative verification rounds with at least one draft token"),
            ("acceptance_rate", "Accepted / proposed draft tokens"),
            ("mean_accepted_length", "Tokens emitted per verification round, bonus/correction token counted"))}

    def observe_step(self, seconds: float, num_seqs: int, num_tokens: int) -> None:
        """An engine step (engine_loop.StepObserver; called on the engine thread)."""
        self.step_seconds.observe(seconds)
        self.step_sequences.inc(num_seqs)
        self.step_tokens.inc(num_tokens)

    def render(self, stats: EngineStats | None) -> bytes:
        if stats is not None:
            self.running.set(stats.num_running)
            self.waiting.set(stats.num_waiting)
            self.blocks_used.set(stats.num_blocks_used)
            self.blocks_free.set(stats.num_blocks_free)
            self.hit_rate.set(stats.prefix_cache_hit_rate)
            self.prefix_queries.set(stats.num_prefix_query_tokens)
            self.prefix_hits.set(stats.num_prefix_hit_tokens)
            if getattr(stats, "speculative", None) is not None:
                for name, value in stats.speculative.as_dict().items():
                    if name in self.spec:
                        self.spec[name].set(value)
        return generate_latest(self.registry)


class ChoiceTimer:
    """Per-choice latency observations: TTFT on the first token, inter-token latency after it."""

    def __init__(self, metrics: ServerMetrics, started: float):
        self.metrics = metrics
        self.started = started
        self.last_token_at: float | None = None

    def on_tokens(self, num_tokens: int) -> None:
        if not num_tokens:
            return
        now = time.perf_counter()
        if self.last_token_at is None:
            self.metrics.ttft.observe(now - self.started)
        else:
            self.metrics.itl.observe((now - self.last_token_at) / num_tokens)
        self.metrics.generation_tokens.inc(num_tokens)
        self.last_token_at = now

    def on_finish(self, finish_reason: str) -> None:
        self.metrics.finished.labels(finish_reason).inc()
        self.metrics.e2e.observe(time.perf_counter() - self.started)
