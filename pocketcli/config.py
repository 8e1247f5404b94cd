"""Engine configuration: one dataclass shared by CLI flags, models.toml and the server."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineConfig:
    model_path: str
    ctx_size: int = 4096  # 0 = the model's trained context length
    max_num_seqs: int = 1
    max_num_batched_tokens: int = 512  # prefill chunk size per step
    block_size: int = 16  # tokens per KV cache block
    backend: str = "cpu"
    enable_prefix_caching: bool = True  # reuse KV blocks of a prompt prefix seen before

    def __post_init__(self):
        if self.ctx_size < 0:
            raise ValueError(f"ctx-size must be >= 0, got {self.ctx_size}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max-num-seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max-num-batched-tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block-size must be >= 1, got {self.block_size}")
