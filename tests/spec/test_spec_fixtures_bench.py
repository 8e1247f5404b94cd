"""bench/spec_fixtures.py end to end on CPU for the cheapest drafter (a draft model: the target quantized to Q4_0,
which drafts every round): the row says the speculative output is the plain output and its counters add up."""
import json

from tests.bench.bench_script import load_bench_script


def load_bench():
    return load_bench_script("spec_fixtures")


def test_draft_model_row_is_lossless_and_counts_add_up(capsys):
    (row,) = load_bench().main(["--drafters", "draft", "-n", "8", "-r", "1", "--spec-k", "3", "--json"])
    assert json.loads(capsys.readouterr().out)["rows"] == [row]
    assert row["identical_output"] is True and row["tokens"] == 8
    assert 1 <= row["rounds"] <= row["decode_steps"] <= 7  # at most one round per decode step after the first token
    assert row["rounds"] <= row["drafted"] <= 3 * row["rounds"] and 0 <= row["accepted"] <= row["drafted"]
    assert 1.0 <= row["mean_accepted_length"] <= 4.0 and row["bonus_token_counted"] is True
    assert row["acceptance_rate"] == round(row["accepted"] / row["drafted"], 4)
    assert row["ms_per_spec_round"] > 0 and row["ms_per_plain_token"] > 0 and row["tok_s_ratio"] > 0


def test_an_unknown_drafter_is_a_usage_error(capsys):
    import pytest

    with pytest.raises(SystemExit) as stop:
        load_bench().main(["--drafters", "eagle"])
    assert stop.value.code == 2 and "unknown drafters ['eagle']" in capsys.readouterr().err
