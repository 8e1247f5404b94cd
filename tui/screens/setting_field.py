"""The settings panel's fields, made from ChatSettings: the system prompt, then every sampling flag field of
SamplingParams (pocketcli/flag_spec.py) in its order, with the flag's help as the field's tooltip. A new sampling
field shows here as it shows in the CLI flags and the server's request fields."""
from __future__ import annotations

import json
from dataclasses import dataclass

from pocketcli.chat.session import ChatSettings
from pocketcli.flag_spec import flag_fields, spec_of

TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on", "1"), ("false", "no", "off", "0", "")


@dataclass(frozen=True)
class SettingField:
    name: str  # the ChatSettings field, and the Input's id
    label: str
    help: str
    kind: str  # the field's annotation: "float", "int", "int | None", "list[str]", "bool", "str"

    def show(self, value) -> str:
        if value is None or value == []:
            return ""
        return json.dumps(value) if self.kind == "list[str]" else str(value)

    def parse(self, text: str):
        """The field's value for the text typed; a ValueError names the field."""
        try:
            return PARSERS[self.kind](text.strip())
        except ValueError as exc:
            raise ValueError(f"{self.label}: {exc}") from None


def parse_optional_int(text: str) -> int | None:
    return int(text) if text else None


def parse_strings(text: str) -> list[str]:
    """Empty: none; a JSON list: its strings; any other text: one string."""
    if not text.startswith("["):
        return [text] if text else []
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a JSON list of strings ({exc.msg})") from None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError("not a JSON list of strings")
    return values


def parse_bool(text: str) -> bool:
    if text.lower() not in TRUE_WORDS + FALSE_WORDS:
        raise ValueError(f"expected yes or no, got {text!r}")
    return text.lower() in TRUE_WORDS


PARSERS = {"float": float, "int": int, "int | None": parse_optional_int, "list[str]": parse_strings,
           "bool": parse_bool, "str": str}


def label_of(name: str) -> str:
    """top_p -> Top-p, max_tokens -> Max tokens: a one-letter word joins the word before with a hyphen."""
    words = name.split("_")
    text = words[0] + "".join(("-" if len(word) == 1 else " ") + word for word in words[1:])
    return text[0].upper() + text[1:]


def setting_fields(settings_class=ChatSettings) -> list[SettingField]:
    sampling = [SettingField(name, label_of(name), spec_of(field).help, field.type)
                for name, field in flag_fields(settings_class).items()]
    return [SettingField("system", "System prompt", "the system prompt of this chat", "str"), *sampling]


SETTING_FIELDS = setting_fields()
