"""pocket perplexity: llama-perplexity's windows, scoring and ± on hand-made numbers, and the command end to end on a
tiny model (reference kernels: nothing to compile)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from pocketcli.cli import main
from pocketcli.engine.perplexity import Divergence, PerplexityEstimate, make_windows, token_nll
from tests.models.tiny_gguf import write_tiny_model

TEXT = Path(__file__).parents[2] / "bench" / "texts" / "botchan.txt"


def test_windows_do_not_overlap_start_with_bos_and_drop_the_tail():
    windows = make_windows(list(range(10, 21)), 4, bos_id=1)
    assert windows == [[1, 11, 12, 13], [1, 15, 16, 17]]
    assert make_windows(list(range(10, 21)), 4, bos_id=None, max_windows=1) == [[10, 11, 12, 13]]
    with pytest.raises(ValueError, match="fewer than one window"):
        make_windows([1, 2, 3], 4, bos_id=1)


def test_token_nll_is_minus_the_log_softmax_of_the_next_token():
    logits = np.array([[0.0, np.log(3.0)], [5.0, 5.0]], np.float32)
    np.testing.assert_allclose(token_nll(logits, np.array([1, 0])), [-np.log(0.75), np.log(2.0)], rtol=1e-6)


def test_estimate_and_its_uncertainty_are_llama_cpps():
    estimate = PerplexityEstimate()
    nll = np.array([1.0, 2.0, 3.0, 2.0])
    estimate.add(nll[:2])
    estimate.add(nll[2:])
    mean, variance = nll.mean(), (nll ** 2).mean() - nll.mean() ** 2
    assert estimate.perplexity == pytest.approx(math.exp(mean))
    assert estimate.uncertainty == pytest.approx(math.sqrt(variance / 3) * math.exp(mean))


def test_the_shipped_text_is_there_and_small():
    assert 50_000 <= TEXT.stat().st_size <= 200_000
    assert "Public domain" in (TEXT.parent / "README.md").read_text()


def test_perplexity_command_on_a_tiny_model(capsys, tmp_path):
    model = write_tiny_model(tmp_path / "tiny.gguf", "llama")
    text = tmp_path / "text.txt"
    text.write_text(TEXT.read_text()[:600])
    args = ["perplexity", "-m", str(model), "-f", str(text), "--ctx-size", "16", "--chunks", "3",
            "--backend", "reference", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["windows"] == 3 and report["scored_tokens"] == 3 * 7 and report["kv_type"] == "f16"
    assert 1.0 < report["perplexity"] < 1e4 and report["uncertainty"] > 0
    assert main(args[:-1] + ["--kv-type", "nope"]) == 2
    assert main(args[:-1] + ["--kl-base", "nope"]) == 2
    assert main(["perplexity", "-m", str(model), "-f", str(tmp_path / "absent.txt")]) == 2


def test_kl_base_compares_two_kv_types_window_by_window(capsys, tmp_path):
    model = write_tiny_model(tmp_path / "tiny.gguf", "llama")
    text = tmp_path / "text.txt"
    text.write_text(TEXT.read_text()[:600])
    args = ["perplexity", "-m", str(model), "-f", str(text), "--ctx-size", "16", "--chunks", "2", "--json"]
    assert main(args + ["--kv-type", "f32", "--kl-base", "f32"]) == 0
    same = json.loads(capsys.readouterr().out)  # the same cache type: the same logits
    assert same["mean_kl"] == 0 and same["top_token_agreement"] == 1 and same["log_ppl_ratio"] == 0
    assert main(args + ["--kv-type", "bf16", "--kl-base", "f32"]) == 0
    lossy = json.loads(capsys.readouterr().out)
    assert lossy["kl_base"] == "f32" and lossy["mean_kl"] > 0 and lossy["log_ppl_ratio_uncertainty"] > 0


def test_divergence_of_hand_made_logits():
    base = np.log(np.float64([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    this = np.log(np.float64([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]]))
    divergence = Divergence()
    divergence.add(base, this, np.array([0, 1]))
    assert divergence.mean_kl == pytest.approx((0.5 * math.log(2) + 0.25 * math.log(0.5)) / 2)
    assert divergence.top_agreement == 0.5
    assert divergence.log_ratio == pytest.approx(math.log(2) / 2)
