"""A modal listing the models to switch to: registry entries and the model files found in the models dir.
Enter picks one (the chat screen loads it); Esc leaves the current model."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from pocketcli.registry import ModelChoice


class ModelPickerScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, choices: list[ModelChoice], current: str):
        super().__init__()
        self.choices = choices
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Label(f"Switch model (now: {self.current}) · Enter loads · Esc cancels", id="picker-title",
                        markup=False)
            yield OptionList(*(self.option(i, c) for i, c in enumerate(self.choices)), id="models")

    def option(self, index: int, choice: ModelChoice) -> Option:
        mark = "● " if choice.label == self.current else "  "
        prompt = Text.assemble(mark, (choice.label, "bold" if choice.installed else "dim"), "\n   ",
                               (choice.detail, "dim"))
        return Option(prompt, id=str(index))

    def on_mount(self) -> None:
        models = self.query_one("#models", OptionList)
        models.focus()
        current = [i for i, c in enumerate(self.choices) if c.label == self.current]
        models.highlighted = current[0] if current else (0 if self.choices else None)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.choices[int(event.option.id)].reference)

    def action_cancel(self) -> None:
        self.dismiss(None)
