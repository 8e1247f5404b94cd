"""A z-lab DFlash block-diffusion draft model (safetensors + config.json), run with the target's kernels.

Target features (outputs of the target layers `target_layer_ids`, concatenated) -> `fc` -> `hidden_norm` give
one context row c per committed position; every draft layer projects c to K/V ("KV injection": no
input_layernorm on c, k_norm + RoPE on K, no norm on V). The query block [last token, MASK x (B-1)] attends
NON-causally to all context rows and all block rows, and the target's LM head scores positions 1..B-1.
The draft has no embedding or LM head of its own: both come from the target.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_loader.hf_checkpoint import to_float32
from gguf_loader.safetensors_reader import open_safetensors_dir


class DFlashCheckpointError(ValueError):
    """The DFlash checkpoint is missing, malformed, or does not fit the target model."""


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def from_dict(cls, raw: dict) -> "DFlashConfig":
        dflash = raw.get("dflash_config", {})
        try:
            hidden = raw["hidden_size"]
            heads = raw["num_attention_heads"]
            return cls(hidden_size=hidden, num_layers=raw["num_hidden_layers"], num_heads=heads,
                       num_kv_heads=raw.get("num_key_value_heads", heads),
                       head_dim=raw.get("head_dim") or hidden // heads, rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
                       rope_theta=raw.get("rope_theta", 1000000.0),
                       block_size=raw.get("block_size") or dflash["block_size"],
                       mask_token_id=dflash["mask_token_id"], target_layer_ids=tuple(dflash["target_layer_ids"]))
        except KeyError as exc:
            raise DFlashCheckpointError(f"DFlash config.json lacks {exc.args[0]!r}") from None


@dataclass
class DFlashLayer:
    input_norm: np.ndarray
    wq: np.ndarray  # [H*hd, d]
    wk: np.ndarray  # [KVH*hd, d]
    wv: np.ndarray
    wo: np.ndarray  # [d, H*hd]
    q_norm: np.ndarray
    k_norm: np.ndarray
    post_attn_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray


def load_dflash_checkpoint(path: str) -> tuple[DFlashConfig, dict[str, np.ndarray]]:
    directory = Path(path)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise DFlashCheckpointError(f"{path}: not a DFlash checkpoint directory (no config.json)")
    config = DFlashConfig.from_dict(json.loads(config_path.read_text()))
    infos, _ = open_safetensors_dir(directory)  # the loader's own reader: index or single file, header checks
    weights = {name.removeprefix("model."): to_float32(info.file.raw(info), info.dtype).reshape(info.shape)
               for name, info in infos.items()}
    return config, weights


class DFlashModel:
    def __init__(self, config: DFlashConfig, weights: dict[str, np.ndarray], target_model):
        self.config = config
        self.target = target_model  # embedding, LM head and kernels come from here
        self.ops = target_model.ops
        self._check_fits_target()

        def w(name: str) -> np.ndarray:
            if name not in weights:
                raise DFlashCheckpointError(f"DFlash checkpoint lacks tensor {name}")
            return np.ascontiguousarray(weights[name])

        self.fc, self.hidden_norm, self.norm = w("fc.weight"), w("hidden_norm.weight"), w("norm.weight")
        self.layers = [DFlashLayer(
            input_norm=w(f"layers.{i}.input_layernorm.weight"), wq=w(f"layers.{i}.self_attn.q_proj.weight"),
            wk=w(f"layers.{i}.self_attn.k_proj.weight"), wv=w(f"layers.{i}.self_attn.v_proj.weight"),
            wo=w(f"layers.{i}.self_attn.o_proj.weight"), q_norm=w(f"layers.{i}.self_attn.q_norm.weight"),
            k_norm=w(f"layers.{i}.self_attn.k_norm.weight"),
            post_attn_norm=w(f"layers.{i}.post_attention_layernorm.weight"),
            w_gate=w(f"layers.{i}.mlp.gate_proj.weight"), w_up=w(f"layers.{i}.mlp.up_proj.weight"),
            w_down=w(f"layers.{i}.mlp.down_proj.weight")) for i in range(config.num_layers)]
        if self.fc.shape != (config.hidden_size, len(config.target_layer_ids) * target_model.hparams.hidden_size):
            raise DFlashCheckpointError(f"DFlash fc.weight has shape {self.fc.shape}; the target needs "
                                        f"[{config.hidden_size}, {len(config.target_layer_ids)} x "
                                        f"{target_model.hparams.hidden_size}]")

    def _check_fits_target(self) -> None:
        hp, cfg = self.target.hparams, self.config
        if cfg.hidden_size != hp.hidden_size:
            raise DFlashCheckpointError(f"DFlash hidden size {cfg.hidden_size} != target's {hp.hidden_size} (the "
                                        f"drafter shares the target's embedding)")
        bad = [layer for layer in cfg.target_layer_ids if not 0 <= layer < hp.num_layers]
        if bad:
            raise DFlashCheckpointError(f"DFlash target layer {bad[0]} is outside the target's {hp.num_layers} layers")
        if not 0 <= cfg.mask_token_id < hp.vocab_size:
            raise DFlashCheckpointError(f"DFlash mask token {cfg.mask_token_id} is outside the target's vocabulary")

    # ---- pieces

    def _rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return self._host(self.ops.rms_norm(np.ascontiguousarray(x, dtype=np.float32), weight,
                                            self.config.rms_norm_eps))

    def _heads(self, x: np.ndarray, weight: np.ndarray, norm: np.ndarray | None, num_heads: int) -> np.ndarray:
        """x: [T, d] -> projected [T, num_heads, hd], with the per-head RMSNorm when given."""
        y = np.ascontiguousarray(x @ weight.T, dtype=np.float32)
        hd = self.config.head_dim
        if norm is not None:
            y = self._rms_norm(y.reshape(-1, hd), norm)
        return y.reshape(x.shape[0], num_heads, hd)

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self._host(self.ops.rope(x, positions.astype(np.int64), self.config.rope_theta, True, 1.0, None))

    def _host(self, x) -> np.ndarray:
        """A kernel's result as a numpy array: the draft's own math runs on the host, also beside a CUDA target
        (whose kernels return device arrays)."""
        return self.ops.to_host(x)

    # ---- context (KV injection)

    def context_rows(self, features: np.ndarray) -> np.ndarray:
        """features: [n, K*D_target] concatenated target layer outputs -> context rows c: [n, d]."""
        return self._rms_norm(features @ self.fc.T, self.hidden_norm)

    def context_kv(self, rows: np.ndarray, positions: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per layer (K, V) of the context rows: K [n, KVH, hd] with k_norm and RoPE, V [n, KVH, hd]."""
        kvh = self.config.num_kv_heads
        return [(self._rope(self._heads(rows, layer.wk, layer.k_norm, kvh), positions),
                 self._heads(rows, layer.wv, None, kvh)) for layer in self.layers]

    # ---- the block

    def draft_logits(self, block_token_ids: np.ndarray, block_positions: np.ndarray,
                     context_kv: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """One block [B] with its context K/V -> target-head logits [B - 1, vocab] for block slots 1..B-1."""
        cfg = self.config
        h = self._host(self.ops.embedding(block_token_ids.astype(np.int64), self.target.token_embedding))
        h = h.astype(np.float32)
        scale = self.target.embedding_scale()
        if scale != 1.0:
            h *= np.float32(scale)
        for layer, (ctx_k, ctx_v) in zip(self.layers, context_kv):
            a = self._rms_norm(h, layer.input_norm)
            q = self._rope(self._heads(a, layer.wq, layer.q_norm, cfg.num_heads), block_positions)
            k = np.concatenate([ctx_k, self._rope(self._heads(a, layer.wk, layer.k_norm, cfg.num_kv_heads),
                                                  block_positions)])
            v = np.concatenate([ctx_v, self._heads(a, layer.wv, None, cfg.num_kv_heads)])
            h = h + block_attention(q, k, v) @ layer.wo.T
            m = self._rms_norm(h, layer.post_attn_norm)
            gate, up = np.ascontiguousarray(m @ layer.w_gate.T), np.ascontiguousarray(m @ layer.w_up.T)
            h = h + self._host(self.ops.silu_mul(gate, up)) @ layer.w_down.T
        out = self._rms_norm(h[1:], self.norm)
        return self._host(self.ops.linear(out, self.target.lm_head))


def block_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Non-causal attention: q [B, H, hd] over all of k, v [n, KVH, hd] (GQA) -> [B, H*hd]."""
    num_heads, num_kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
    group = num_heads // num_kv_heads
    k = np.repeat(k, group, axis=1)  # [n, H, hd]
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("bhd,nhd->hbn", q, k) / np.sqrt(head_dim)  # [H, B, n]
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("hbn,nhd->bhd", weights, v).reshape(q.shape[0], -1).astype(np.float32)
