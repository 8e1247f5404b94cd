"""YaRN rope scaling as DeepSeek-V3 / R1 / Kimi-K2 use it: GGUF keys <-> the scaling, and its host-side tables.

YaRN (HF transformers `_compute_yarn_parameters`, ggml's rope_yarn) blends, per rotated pair i, the original
inverse frequency with the one interpolated by `factor`: pairs below the correction dimension of beta_fast
rotations (over the original context) keep theirs, pairs above beta_slow's are divided by `factor`, with a
linear ramp between (bounds floored / ceiled: HF's truncate=True, ggml always). That is a per-pair divisor of the
inverse frequency, so it becomes llama.cpp-style rope frequency factors and every rope kernel runs it unchanged.
Two magnitudes: cos/sin are multiplied by `attention_factor` (HF) and DeepSeek multiplies the softmax scale by
mscale(factor, mscale_all_dim)^2 (HF DeepseekV3Attention / llama.cpp deepseek2 kq_scale).

GGUF keys as llama.cpp writes them (`conversion/deepseek.py`): rope.scaling.type = "yarn", .factor,
.original_context_length, .yarn_log_multiplier = 0.1 * mscale_all_dim (llama.cpp's loader divides the 0.1 back
out: TAG_DEEPSEEK2_YARN_LOG_MUL_FIX), optional .yarn_beta_fast / .yarn_beta_slow / .yarn_attn_factor. Without
yarn_attn_factor, llama.cpp takes mscale = mscale_all_dim for deepseek2, so cos/sin stay unscaled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ModelFileError, UnsupportedModelError

LOG_MULTIPLIER_PER_MSCALE = 0.1  # llama.cpp's converter writes yarn_log_multiplier = 0.1 * mscale_all_dim
DEFAULT_BETA_FAST, DEFAULT_BETA_SLOW = 32.0, 1.0  # HF and llama.cpp defaults


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction 0.1 * mscale * ln(factor) + 1 (1 without extension)."""
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class YarnRope:
    factor: float
    original_context_length: int
    beta_fast: float = DEFAULT_BETA_FAST
    beta_slow: float = DEFAULT_BETA_SLOW
    mscale_all_dim: float = 0.0  # 0: the softmax scale is left alone
    attention_factor: float = 1.0  # cos/sin multiplier

    @property
    def softmax_scale_multiplier(self) -> float:
        """DeepSeek's softmax_scale *= mscale(factor, mscale_all_dim)^2."""
        if not self.mscale_all_dim:
            return 1.0
        return yarn_mscale(self.factor, self.mscale_all_dim) ** 2

    def correction_range(self, rope_dim: int, theta: float) -> tuple[float, float]:
        """(low, high) pair indices of the ramp: beta_fast / beta_slow rotations over the original context."""
        def dim_of(rotations: float) -> float:
            return (rope_dim * math.log(self.original_context_length / (rotations * 2 * math.pi))
                    / (2 * math.log(theta)))

        low, high = math.floor(dim_of(self.beta_fast)), math.ceil(dim_of(self.beta_slow))
        return max(low, 0), min(high, rope_dim - 1)

    def freq_factors(self, rope_dim: int, theta: float) -> np.ndarray:
        """float32 [rope_dim/2]: divisors of theta^(-2i/rope_dim), i.e. rope frequency factors."""
        low, high = self.correction_range(rope_dim, theta)
        pair_ids = np.arange(rope_dim // 2, dtype=np.float64)
        ramp = np.clip((pair_ids - low) / max(high - low, 0.001), 0.0, 1.0)  # 0: original, 1: interpolated
        keep = 1.0 - ramp  # HF's inv_freq_extrapolation_factor
        return (1.0 / (keep + (1.0 - keep) / self.factor)).astype(np.float32)


def yarn_from_gguf(metadata: dict[str, Any], arch: str) -> YarnRope | None:
    """The YaRN scaling in `arch`'s rope.scaling.* keys, None without scaling; other scaling types refused."""
    p = f"{arch}.rope.scaling."
    scaling_type = str(metadata.get(p + "type", "none"))
    if scaling_type == "none" or float(metadata.get(p + "factor", 1.0) or 1.0) == 1.0:
        return None
    if scaling_type != "yarn":
        raise UnsupportedModelError(f"{arch}: rope scaling type '{scaling_type}' is not supported (supported: yarn)")
    if p + "original_context_length" not in metadata:
        raise ModelFileError(f"{arch}: YaRN rope scaling without {p}original_context_length")
    factor = float(metadata[p + "factor"])
    mscale_all_dim = float(metadata.get(p + "yarn_log_multiplier", 0.0)) / LOG_MULTIPLIER_PER_MSCALE
    default_attention = 1.0 if mscale_all_dim else yarn_mscale(factor)  # llama.cpp: mscale = mscale_all_dim
    return YarnRope(factor=factor, original_context_length=int(metadata[p + "original_context_length"]),
                    beta_fast=float(metadata.get(p + "yarn_beta_fast", DEFAULT_BETA_FAST)),
                    beta_slow=float(metadata.get(p + "yarn_beta_slow", DEFAULT_BETA_SLOW)),
                    mscale_all_dim=mscale_all_dim,
                    attention_factor=float(metadata.get(p + "yarn_attn_factor", default_attention)))


def yarn_gguf_metadata(arch: str, params: dict, max_position_embeddings: int, where: str) -> dict[str, Any]:
    """An HF `rope_parameters` / `rope_scaling` dict of rope_type yarn as the GGUF keys yarn_from_gguf reads."""
    if params.get("truncate", True) is False:
        raise UnsupportedModelError(f"{where}: YaRN with truncate false is not supported")
    try:
        original = int(params["original_max_position_embeddings"])
    except (KeyError, TypeError, ValueError):
        raise ModelFileError(f"{where}: YaRN rope scaling needs original_max_position_embeddings") from None
    factor = float(params.get("factor") or max_position_embeddings / original)
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    attention = params.get("attention_factor")
    if attention is None:  # HF: the ratio when both are given, else from the factor alone
        attention = (yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim) if mscale and mscale_all_dim
                     else yarn_mscale(factor))
    p = f"{arch}.rope.scaling."
    return {p + "type": "yarn", p + "factor": factor, p + "original_context_length": original,
            p + "yarn_log_multiplier": LOG_MULTIPLIER_PER_MSCALE * float(mscale_all_dim or 0.0),
            p + "yarn_beta_fast": float(params.get("beta_fast") or DEFAULT_BETA_FAST),
            p + "yarn_beta_slow": float(params.get("beta_slow") or DEFAULT_BETA_SLOW),
            p + "yarn_attn_factor": float(attention)}
