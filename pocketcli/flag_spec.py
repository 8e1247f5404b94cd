"""What a settings field says about itself as a command-line flag and as an OpenAI request field, so that
SamplingParams and EngineConfig are the one place a setting's default and help live: the CLI flags
(pocketcli/commands/field_flags.py), the chat settings and the server's request defaults are read from them.

    temperature: float = setting(0.8, "sampling temperature (0 = greedy)", aliases=("--temp",), api_default=1.0)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

FLAG_SPEC = "flag"  # the dataclass field metadata key
SAME = object()  # "as the field's own default" / "as the field's name"


@dataclass(frozen=True)
class FlagSpec:
    help: str
    flag: str | None = None  # the long option when it is not --field-name (--batch-size)
    aliases: tuple[str, ...] = ()  # more option strings (-n, --temp)
    cli_default: Any = SAME  # the commands' default where the dataclass's differs (an engine built in code)
    metavar: str | None = None
    choices: tuple | None = None
    commands: tuple[str, ...] | None = None  # the commands that take the flag; None: every one that takes the group
    api_name: Any = SAME  # the OpenAI request field; None: requests cannot set it
    api_default: Any = SAME  # the OpenAI API's default where it differs from ours

    def option_strings(self, name: str) -> list[str]:
        """Short options first, as help lists them: -c, --ctx-size."""
        return sorted([self.flag or "--" + name.replace("_", "-"), *self.aliases], key=lambda o: o.startswith("--"))


def setting(default: Any, help: str, **spec) -> Any:
    """A dataclass field with its default and its FlagSpec (a mutable default such as [] becomes a factory)."""
    metadata = {FLAG_SPEC: FlagSpec(help, **spec)}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_fields(cls) -> dict[str, dataclasses.Field]:
    """The fields of `cls` that are flags, by name, in declaration order."""
    return {f.name: f for f in dataclasses.fields(cls) if FLAG_SPEC in f.metadata}


def spec_of(field: dataclasses.Field) -> FlagSpec:
    return field.metadata[FLAG_SPEC]


def default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()


def cli_default(field: dataclasses.Field) -> Any:
    spec = spec_of(field)
    return default_of(field) if spec.cli_default is SAME else spec.cli_default


def api_fields(cls) -> dict[str, str]:
    """OpenAI request field -> field of `cls`, for the flags a request can set too."""
    return {(f.name if spec_of(f).api_name is SAME else spec_of(f).api_name): f.name
            for f in flag_fields(cls).values() if spec_of(f).api_name is not None}


def api_default(cls, name: str) -> Any:
    """The OpenAI API's default of field `name` of `cls` (ours unless the FlagSpec names another)."""
    field = flag_fields(cls)[name]
    return default_of(field) if spec_of(field).api_default is SAME else spec_of(field).api_default


def api_defaults(cls) -> dict[str, Any]:
    """Every flag field of `cls` as an OpenAI request that sets nothing gets it."""
    return {name: api_default(cls, name) for name in flag_fields(cls)}


def with_default(cls, name: str, default: Any) -> Any:
    """Field `name` of `cls` (flag, help and all) with another default, for a subclass (chat's reply cap)."""
    return dataclasses.field(default=default, metadata=flag_fields(cls)[name].metadata)
