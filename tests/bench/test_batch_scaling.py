"""bench/batch_scaling.py on a tiny model through the CPU engine: each batch is prepared at the asked context,
every (sequences, threads) variant is measured, and the report gives the ratios against the lone sequence."""
import numpy as np

from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from tests.bench.bench_script import load_bench_script
from tests.models.tiny_gguf import write_tiny_model

scaling = load_bench_script("batch_scaling")


def test_interleaved_steps_of_prepared_batches(tmp_path, capsys):
    engine = LLMEngine(EngineConfig(str(write_tiny_model(tmp_path / "llama.gguf", "llama", quant="Q8_0")),
                                    ctx_size=64, max_num_seqs=3))
    steps = [scaling.prepare_step(engine, num_seqs, context_tokens=12) for num_seqs in (1, 3)]
    assert not engine.has_unfinished()  # the prepared sequences were dropped
    for step in steps:
        assert len(step.items) == len(step.token_ids) == step.num_seqs
        assert (step.positions >= 11).all()  # the next token of sequences holding >= 12 tokens
    logits = engine.model.compute_logits(engine.model.forward(
        steps[1].token_ids, steps[1].positions, steps[1].attn, engine.kv_cache.keys, engine.kv_cache.values))
    assert logits.shape[0] == 3 and np.isfinite(logits).all()
    medians = scaling.interleaved_medians(engine, steps, [1, 2], rounds=2)
    assert set(medians) == {(1, 1), (1, 2), (3, 1), (3, 2)}
    for figures in medians.values():
        assert all(figures[name] > 0 for name in scaling.PHASES)
        assert np.isclose(figures["step"], sum(figures[name] for name in scaling.PHASES), rtol=0.5)
    scaling.report(medians, [1, 3], [1, 2])
    out = capsys.readouterr().out
    assert "2 threads: 3 seqs' step = " in out and "3 seqs, 1 -> 2 threads: step " in out
