"""Command-line flags made from dataclass fields (pocketcli/flag_spec.py): SamplingParams' and EngineConfig's
fields are the flags of generate, chat, serve and bench, each with the one default and help text its field has.

A sampling flag defaults to None, "not given": the value then comes from the model's recommended settings where it
has one (sampling_defaults.py), else from the command's defaults (SamplingParams, chat's ChatSettings, the server's
OpenAI API defaults). An engine flag defaults to its field's CLI default.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..flag_spec import SAME, cli_default, flag_fields, spec_of

PARSERS = {"float": float, "int": int, "int | None": int, "str": str, "str | None": str}


def add_field_flags(parser: argparse.ArgumentParser, cls, command: str, defaults=None, unset: bool = False,
                    describe_default=None) -> None:
    """A flag for each flag field of `cls` that `command` takes, its default the field's CLI default unless
    `defaults` (a dataclass, an instance or a dict of some fields) says otherwise. unset: the flags default to None
    (resolved later; the help still shows the default); describe_default(name, value) -> the help's default text."""
    for name, field in flag_fields(cls).items():
        spec = spec_of(field)
        if spec.commands is not None and command not in spec.commands:
            continue
        default = cli_default(field) if defaults is None else default_in(defaults, name, cli_default(field))
        parser.add_argument(*spec.option_strings(name), dest=name, default=None if unset else default,
                            help=help_text(spec.help, describe_default(name, default) if describe_default
                                           else describe(default)),
                            **value_options(field))


def value_options(field: dataclasses.Field) -> dict[str, Any]:
    spec, kind = spec_of(field), field.type
    if kind == "bool":
        return {"action": "store_false" if cli_default(field) else "store_true"}
    if kind == "list[str]":
        return {"action": "append", "metavar": spec.metavar or "TEXT"}
    if kind == "tuple[int, ...]":
        return {"metavar": spec.metavar}  # parsed by the command (commands.common.parse_devices)
    options = {"type": PARSERS[kind]}
    if spec.choices is not None:
        options["choices"] = spec.choices
    else:  # named after the flag, not the field: --batch-size BATCH_SIZE
        options["metavar"] = spec.metavar or (spec.flag or field.name).lstrip("-").replace("-", "_").upper()
    return options


def default_in(defaults, name: str, fallback: Any = None) -> Any:
    """`name`'s default in `defaults`: a dataclass, an instance, or a dict (`fallback` for a field it lacks)."""
    if isinstance(defaults, dict):
        return defaults.get(name, fallback)
    if isinstance(defaults, type):
        field = {f.name: f for f in dataclasses.fields(defaults)}[name]
        return field.default if field.default is not dataclasses.MISSING else field.default_factory()
    return getattr(defaults, name)


def describe(default: Any) -> str:
    if default is None or default == [] or default is False or default is True:
        return ""
    return f"default: {default}"


def help_text(text: str, default: str) -> str:
    return f"{text} ({default})" if default else text


def given_values(args: argparse.Namespace, cls) -> dict[str, Any]:
    """The flags of `cls` the user gave (unset flags are None)."""
    return {name: getattr(args, name) for name in flag_fields(cls) if getattr(args, name, None) is not None}


def flag_values(args: argparse.Namespace, cls) -> dict[str, Any]:
    """Every flag of `cls` the command has, set or not."""
    return {name: getattr(args, name) for name in flag_fields(cls) if hasattr(args, name)}


__all__ = ["SAME", "add_field_flags", "flag_values", "given_values"]
