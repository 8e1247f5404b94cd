"""Engine configuration: one dataclass shared by CLI flags, models.toml and the server."""
from __future__ import annotations

from dataclasses import dataclass

from kernels_numba.kv_type import kv_type_named

SPEC_METHODS = ("ngram", "draft", "dflash", "mtp")  # speculative-decoding drafters
MAX_SPEC_K = 16


@dataclass
class EngineConfig:
    model_path: str
    ctx_size: int = 4096  # 0 = the model's trained context length
    max_num_seqs: int = 1
    max_num_batched_tokens: int = 512  # prefill chunk size per step
    block_size: int = 16  # tokens per KV cache block
    backend: str = "cpu"
    enable_prefix_caching: bool = True  # reuse KV blocks of a prompt prefix seen before
    spec: str | None = None  # speculative decoding drafter (SPEC_METHODS); None = off
    spec_k: int = 4  # most draft tokens per sequence and round; adaptive k stays in [1, spec_k]
    draft_model_path: str | None = None  # --spec draft (same vocabulary) or --spec dflash (DFlash checkpoint)
    tp_size: int = 1  # tensor-parallel ranks (one process each; pocketcli/parallel)
    devices: tuple[int, ...] = ()  # CUDA ordinal of each rank (default 0..tp_size-1)
    follow_free_cores: bool = False  # numba's thread count (at most the one at build) follows the free cores (CLI)
    # the KV cache's storage type (kernels_numba/kv_type.py: f32, f16, bf16, q8_0, q4_0, fp8). generate, chat, serve
    # and bench default to f16 (--kv-type); an engine built in code keeps exact float32 attention unless it asks
    kv_type: str = "f32"

    def __post_init__(self):
        if self.ctx_size < 0:
            raise ValueError(f"ctx-size must be >= 0, got {self.ctx_size}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max-num-seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max-num-batched-tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block-size must be >= 1, got {self.block_size}")
        self._check_spec()
        self._check_parallel()
        kv_type_named(self.kv_type)  # a ValueError naming the choices

    def _check_spec(self) -> None:
        if self.spec is None and self.draft_model_path:
            self.spec = "draft"  # --draft-model alone means draft-model speculation
        if self.spec is not None and self.spec not in SPEC_METHODS:
            raise ValueError(f"spec must be one of {', '.join(SPEC_METHODS)}, got {self.spec!r}")
        if not 1 <= self.spec_k <= MAX_SPEC_K:
            raise ValueError(f"spec-k must be in [1, {MAX_SPEC_K}], got {self.spec_k}")
        if self.spec in ("draft", "dflash") and not self.draft_model_path:
            raise ValueError(f"--spec {self.spec} needs --draft-model PATH")

    def _check_parallel(self) -> None:
        if self.tp_size < 1:
            raise ValueError(f"--tp must be >= 1, got {self.tp_size}")
        if self.devices and len(self.devices) != self.tp_size:
            raise ValueError(f"--devices lists {len(self.devices)} devices for --tp {self.tp_size}")
        if self.tp_size > 1 and self.spec in ("dflash", "mtp"):
            raise ValueError(f"--spec {self.spec} reads the target model's own weights: not with --tp > 1 "
                             f"(ngram and draft work)")
