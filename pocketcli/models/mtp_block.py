"""Multi-token-prediction (MTP) blocks stored after a model's main layers (llama.cpp's `blk.N.nextn.*` layout).

One step at position p (specdecode_notes 1.1): x = eh_proj(cat[enorm(emb(t_{p+1})), hnorm(H_p)]) -> one decoder
block of the model's own kind (with its own KV cache) -> shared_head_norm -> the target's lm_head, predicting
t_{p+2}. H_p is the target's post-final-norm hidden state; the normed block output is also the hidden state fed
to the next draft step. Families differ only in two details, set as class attributes:
* Qwen3-Next / Qwen3.5 (`mtp.*`): [embedding, hidden] order, every position embedded;
* MiMo (`model.mtp_layers.*`): [hidden, embedding] order, and the embedding at position 0 is zeroed (vLLM and
  SGLang's mimo_mtp: "masking inputs at position 0, as not needed by MTP");
* DeepSeek-V3 (`nextn`, model.layers.{num_hidden_layers}.*): [embedding, hidden], position 0 zeroed too.
On a device backend (cuda) the step stays there: concatenation and zeroing are the backend's ops (eh_proj stays
one linear over [.|.], so any quant type the backend's linear takes works), and its logits and hidden come back
as device arrays (the drafter reads only the argmax).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gguf_loader import GGUFFile, WeightTensor

from .attn_metadata import AttnMetadata
from .base import float_vector


@dataclass
class MTPWeights:
    """One MTP block; embedding and head are the target's."""
    eh_proj: WeightTensor  # [D, 2D], columns in the family's concatenation order
    enorm: np.ndarray
    hnorm: np.ndarray
    shared_head_norm: np.ndarray
    layer: Any  # the architecture's own layer weights (a full-attention block)
    layer_id: int  # its block index, after the main layers


class MTPModelMixin:
    """For DecoderModel subclasses whose last blocks are MTP blocks: `_split_mtp_layers` after loading moves them
    from `layers` (run by forward) to `mtp_layers` (run by the MTP drafter through `mtp_forward`)."""

    mtp_hidden_first = False  # concatenation order fed to eh_proj: [hidden, embedding] instead of [embedding, hidden]
    mtp_zero_embedding_at_position_0 = False
    mtp_on_device = False  # a family sets True once its mtp_forward runs on cuda (tests/cuda/sim/test_cuda_mtp)
    num_main_layers: int

    def _split_mtp_layers(self, model_file: GGUFFile, num_mtp_layers: int) -> None:
        self.num_main_layers = len(self.layers) - num_mtp_layers
        self.mtp_layers = [self._load_mtp(model_file, i, layer) for i, layer in enumerate(self.layers)
                           if i >= self.num_main_layers]
        self.layers = self.layers[:self.num_main_layers]

    def _load_mtp(self, f: GGUFFile, i: int, layer: Any) -> MTPWeights:
        def vector(name: str) -> np.ndarray:
            return float_vector(self._tensor(f, f"blk.{i}.nextn.{name}.weight"))

        norm = (vector("shared_head_norm") if f.has_tensor(f"blk.{i}.nextn.shared_head_norm.weight")
                else self.output_norm)
        return MTPWeights(eh_proj=self._tensor(f, f"blk.{i}.nextn.eh_proj.weight"), enorm=vector("enorm"),
                          hnorm=vector("hnorm"), shared_head_norm=norm, layer=layer, layer_id=i)

    def mtp_forward(self, mtp: MTPWeights, token_ids: np.ndarray, hidden, positions: np.ndarray,
                    attn: AttnMetadata, k_cache, v_cache) -> tuple:
        """One MTP step per row: token t_{p+1} and hidden H_p (post final norm) at position p -> (logits of
        t_{p+2} [n, vocab], the MTP's post-norm hidden [n, D], fed to the next draft step); host positions and
        attn (uploaded here on a device backend), hidden and caches where the backend computes."""
        ops, eps = self.ops, self.hparams.rms_norm_eps
        embedded = ops.embedding(token_ids, self.token_embedding)  # [n, D]
        if self.mtp_zero_embedding_at_position_0:
            self._zero_rows(embedded, np.flatnonzero(np.asarray(positions) == 0))
        e = ops.rms_norm(embedded, mtp.enorm, eps)
        h = ops.rms_norm(ops.contiguous(hidden), mtp.hnorm, eps)
        x = ops.linear(self.ops.concat_columns([h, e] if self.mtp_hidden_first else [e, h]), mtp.eh_proj)
        positions, attn = self._backend_inputs(positions, attn)
        x = self._layer_forward(mtp.layer_id, mtp.layer, x, positions, attn, k_cache, v_cache)
        out = ops.rms_norm(x, mtp.shared_head_norm, eps)
        return ops.linear(out, self.lm_head), out

    def _zero_rows(self, x, rows: np.ndarray) -> None:
        for row in rows:  # a row of a C-contiguous [n, D] array is contiguous: a memset each on a device
            self.ops.fill_zeros(x[int(row):int(row) + 1])
