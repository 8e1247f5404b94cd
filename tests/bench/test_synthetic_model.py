"""bench/synthetic_model.py: llama.cpp's Q4_K_M mix for the real shapes, and a small shape written, loaded and run
(valid blocks of every type it writes, weights about as large as a trained model's)."""
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from gguf_loader import open_gguf
from kernels_numba import get_ops
from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_params import SamplingParams
from tests.bench.bench_script import load_bench_script
from tests.models.tiny_gguf import write_tiny_model

synthetic = load_bench_script("synthetic_model")


def type_counts(shape, mix: str) -> Counter:
    return Counter(synthetic.tensor_type(name, layer, shape, mix).name for name, layer, _ in synthetic.matrices(shape))


def test_mixes_are_llama_cpps():
    """Llama-3.2-1B-Instruct-Q4_K_M.gguf as llama.cpp makes it: q4_K 96 tensors, q6_K 17 (the tied embedding,
    attn_v and ffn_down of layers 0, 1, 4, 7, 10, 13, 14, 15)."""
    one_b, eight_b = synthetic.SHAPES["llama-3.2-1b"], synthetic.SHAPES["llama-3.1-8b"]
    assert type_counts(one_b, "q4_k_m") == {"Q4_K": 96, "Q6_K": 17}
    assert [i for i in range(16) if synthetic.use_more_bits(i, 16)] == [0, 1, 4, 7, 10, 13, 14, 15]
    assert type_counts(eight_b, "q4_k_m") == {"Q4_K": 193, "Q6_K": 33}  # token_embd Q4_K, output Q6_K
    assert type_counts(one_b, "q4_0") == {"Q4_0": 112, "Q6_K": 1} and type_counts(one_b, "q8_0") == {"Q8_0": 113}
    assert sum(np.prod(s) for _, _, s in synthetic.matrices(one_b)) + 16 * 2 * 2048 + 2048 == 1_235_814_400


@pytest.mark.parametrize("mix", ["q4_k_m", "q4_0"])
def test_small_shape_loads_and_runs(tmp_path, mix):
    donor = write_tiny_model(tmp_path / "donor.gguf", "llama")
    shape = replace(synthetic.SHAPES["llama-3.2-1b"], name="small", num_layers=2, hidden=256, ffn=512,
                    num_heads=4, num_kv_heads=2, vocab=512, context_length=256)
    path = synthetic.write_model(tmp_path / "small.gguf", shape, mix, str(donor))
    model = open_gguf(path)
    assert model.metadata["llama.vocab_size"] == 512 and len(model.metadata["tokenizer.ggml.tokens"]) == 512
    reference = get_ops("reference")
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
        w = reference.dequantize(model.tensor(name))
        assert np.isfinite(w).all() and 0.005 < float(w.std()) < 0.05, (name, float(w.std()))
    # the tied embedding is also the output matrix: a decode step reads every byte of every tensor
    assert synthetic.weight_bytes_per_token(path) == sum(model.tensor(n).nbytes for n in model.tensor_infos)
    engine = LLMEngine(EngineConfig(str(path), ctx_size=64, backend="reference"))
    seq = engine.add_request([1, 5, 9], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    assert len(seq.token_ids) == 7
