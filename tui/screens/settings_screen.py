"""A modal with the settings that apply to the next reply: system prompt and sampling."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from pocketcli.chat.session import ChatSettings

FIELDS = [("system", "System prompt", str), ("temperature", "Temperature", float), ("top_p", "Top-p", float),
          ("top_k", "Top-k", int), ("min_p", "Min-p", float), ("max_tokens", "Max tokens", int)]


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, settings: ChatSettings):
        super().__init__()
        self.settings = settings

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Settings (apply to the next reply)", id="title")
            with Grid(id="fields"):
                for name, label, _ in FIELDS:
                    yield Label(label)
                    yield Input(str(getattr(self.settings, name)), id=name)
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
            changes = {name: kind(self.query_one(f"#{name}", Input).value.strip())
                       for name, _, kind in FIELDS}
            settings = self.settings.updated(**changes)
        except ValueError as exc:
            self.notify(f"invalid setting: {exc}", severity="error")
            return
        self.dismiss(settings)

    def action_cancel(self) -> None:
        self.dismiss(None)
