"""A modal with the settings that apply to the next reply: the system prompt and every sampling setting
(its fields are made from SamplingParams: setting_field.py)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from pocketcli.chat.session import ChatSettings

from .setting_field import SETTING_FIELDS


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, settings: ChatSettings):
        super().__init__()
        self.settings = settings

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Settings (apply to the next reply)", id="title")
            with Grid(id="fields"):
                for field in SETTING_FIELDS:  # two to a row; the system prompt takes a row of its own
                    yield Label(field.label).with_tooltip(field.help)
                    yield Input(field.show(getattr(self.settings, field.name)), id=field.name, tooltip=field.help)
            with Horizontal(id="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_save()

    def action_save(self) -> None:
        try:
            changes = {field.name: field.parse(self.query_one(f"#{field.name}", Input).value)
                       for field in SETTING_FIELDS}
            settings = self.settings.updated(**changes)
        except ValueError as exc:
            self.notify(f"invalid setting: {exc}", severity="error")
            return
        self.dismiss(settings)

    def action_cancel(self) -> None:
        self.dismiss(None)
