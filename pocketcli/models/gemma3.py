"""Gemma 3: scaled embeddings, q/k norms, post-attention and post-FFN norms, GELU, 5:1 sliding/global layers."""
import math

from .base import DecoderModel


class Gemma3Model(DecoderModel):
    activation = "gelu"

    def embedding_scale(self) -> float:
        return math.sqrt(self.hparams.hidden_size)

    def attention_scale(self) -> float:
        # llama.cpp: query_pre_attn_scalar = head_dim for every size but 27B (hidden / heads)
        hp = self.hparams
        if hp.num_layers == 62:  # 27B
            return 1.0 / math.sqrt(hp.hidden_size / hp.num_heads)
        return 1.0 / math.sqrt(hp.head_dim)
