"""The settings panel's fields are made from SamplingParams' flag fields: each one shows, with its help, and its
text parses back to the value (no Textual app: cheap)."""
from dataclasses import dataclass

import pytest

from pocketcli.chat.session import ChatSettings
from pocketcli.flag_spec import flag_fields, setting
from pocketcli.sampling_params import SamplingParams
from tui.screens.setting_field import SETTING_FIELDS, label_of, setting_fields


def test_every_sampling_flag_is_a_field_with_its_help():
    by_name = {field.name: field for field in SETTING_FIELDS}
    assert list(by_name) == ["system", *flag_fields(SamplingParams)]
    assert by_name["top_p"].help == flag_fields(SamplingParams)["top_p"].metadata["flag"].help
    assert [label_of(n) for n in ("top_p", "max_tokens", "repeat_last_n")] == ["Top-p", "Max tokens", "Repeat last-n"]


def test_a_new_sampling_field_shows_without_touching_the_panel():
    @dataclass
    class WithTypicalP(ChatSettings):
        typical_p: float = setting(1.0, "locally typical sampling (1.0 disables)")

    assert setting_fields(WithTypicalP)[-1].name == "typical_p"


def test_each_value_round_trips_through_its_text():
    settings = ChatSettings(seed=7, stop=["Tokyo", "a, b"], ignore_eos=True, temperature=0.5, system="be brief")
    for field in SETTING_FIELDS:
        assert field.parse(field.show(getattr(settings, field.name))) == getattr(settings, field.name), field.name
    by_name = {field.name: field for field in SETTING_FIELDS}
    assert by_name["seed"].parse("") is None and by_name["stop"].parse("") == [] and by_name["stop"].parse("x") == ["x"]
    assert by_name["ignore_eos"].parse("no") is False
    for name, text in (("top_k", "2.5"), ("ignore_eos", "maybe"), ("stop", "[1]"), ("stop", "[oops")):
        with pytest.raises(ValueError, match=by_name[name].label):
            by_name[name].parse(text)
