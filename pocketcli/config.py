"""Engine configuration: one dataclass shared by CLI flags, models.toml and the server."""
from __future__ import annotations

from dataclasses import dataclass


from .flag_spec import setting

DEFAULT_KV_TYPE = "f16"  # the commands' KV cache type (kernels_numba/kv_type.py lists the types)

SPEC_METHODS = ("ngram", "draft", "dflash", "mtp")  # speculative-decoding drafters
MAX_SPEC_K = 16


@dataclass
class EngineConfig:
    """Each flag field is a flag of generate, chat, serve and bench (commands.field_flags); its default and help
    are written here once. cli_default: what the commands use where an engine built in code keeps another."""
    model_path: str
    ctx_size: int = setting(4096, "context size in tokens (0 = the model's)", flag="--ctx-size", aliases=("-c",))
    max_num_seqs: int = setting(1, "sequences decoded together", cli_default=8, commands=("serve",))
    max_num_batched_tokens: int = setting(512, "prompt tokens per prefill step", flag="--batch-size",
                                          aliases=("-b",))
    block_size: int = 16  # tokens per KV cache block
    backend: str = setting("cpu", "kernel backend (reference = slow numpy oracle, for debugging)",
                           choices=("cpu", "reference"))  # with --device cuda: "cuda" (commands.common)
    enable_prefix_caching: bool = setting(True, "disable automatic prefix caching", flag="--no-prefix-caching",
                                          commands=("generate", "chat", "serve"))
    spec: str | None = setting(None, "speculative decoding: ngram (prompt lookup), draft (--draft-model), dflash, mtp",
                               choices=SPEC_METHODS)
    spec_k: int = setting(4, "most draft tokens per round")  # adaptive k stays in [1, spec_k]
    draft_model_path: str | None = setting(None, "draft model (GGUF path or registry name) sharing the target's "
                                           "vocabulary (--spec draft), or the DFlash checkpoint (--spec dflash)",
                                           flag="--draft-model", metavar="PATH")
    tp_size: int = setting(1, "tensor parallelism: split every weight over N ranks, one process each (default 1, or "
                           "as many as --devices lists)",
                           flag="--tp", metavar="N", cli_default=None)  # None: as many as --devices lists, else 1
    devices: tuple[int, ...] = setting((), "CUDA devices of the ranks, one per rank (with --device cuda; default "
                                       "0..N-1)", metavar="0,1,...", cli_default=None)  # CUDA ordinal of each rank
    follow_free_cores: bool = False  # numba's thread count (at most the one at build) follows the free cores (CLI)
    cuda_graph: bool = setting(True, "on a GPU, decode a lone sequence step by step instead of replaying one "
                               "captured CUDA graph", flag="--no-cuda-graph")
    # the KV cache's storage type (kernels_numba/kv_type.py); an engine built in code keeps exact float32 attention
    kv_type: str = setting("f32", "KV cache type: f16, bf16, q8_0, fp8, q4_0 or f32", cli_default=DEFAULT_KV_TYPE,
                           metavar="TYPE")

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
        from kernels_numba.kv_type import kv_type_named  # here: `pocket --help` builds configs' flags only

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

    def draft_config(self, max_model_len: int) -> "EngineConfig":
        """The draft model's engine for --spec draft: the target's context, sequences, block size, backend and KV
        type; one rank, no speculation, no prefix cache (its shadow sequences are cut back every round)."""
        return EngineConfig(model_path=self.draft_model_path, ctx_size=max_model_len, max_num_seqs=self.max_num_seqs,
                            block_size=self.block_size, backend=self.backend, enable_prefix_caching=False,
                            kv_type=self.kv_type)

    def _check_parallel(self) -> None:
        if self.tp_size < 1:
            raise ValueError(f"--tp must be >= 1, got {self.tp_size}")
        if self.devices and len(self.devices) != self.tp_size:
            raise ValueError(f"--devices lists {len(self.devices)} devices for --tp {self.tp_size}")
        if self.tp_size > 1 and self.spec in ("dflash", "mtp"):
            raise ValueError(f"--spec {self.spec} reads the target model's own weights: not with --tp > 1 "
                             f"(ngram and draft work)")
