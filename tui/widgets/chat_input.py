"""The prompt box: Enter sends, Shift+Enter or Ctrl+J adds a line, Up/Down at the edges walk the history."""
from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea


class ChatInput(TextArea):
    @dataclass
    class Submitted(Message):
        text: str

    def __init__(self, **kwargs):
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.sent_history: list[str] = []
        self._history_index = 0  # == len(history): the draft being typed
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self._submit()
        elif event.key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
        elif event.key == "up" and self.cursor_location[0] == 0 and self.sent_history:
            event.stop()
            event.prevent_default()
            self._walk_history(-1)
        elif event.key == "down" and self.cursor_location[0] == self.document.line_count - 1 \
                and self._history_index < len(self.sent_history):
            event.stop()
            event.prevent_default()
            self._walk_history(+1)
        else:
            await super()._on_key(event)

    def _submit(self) -> None:
        text = self.text.strip()
        if not text:
            return
        if not self.sent_history or self.sent_history[-1] != text:
            self.sent_history.append(text)
        self._history_index, self._draft = len(self.sent_history), ""
        self.clear()
        self.post_message(self.Submitted(text))

    def _walk_history(self, step: int) -> None:
        if self._history_index == len(self.sent_history):
            self._draft = self.text
        self._history_index = max(0, min(len(self.sent_history), self._history_index + step))
        text = self.sent_history[self._history_index] if self._history_index < len(self.sent_history) else self._draft
        self.load_text(text)
        self.move_cursor(self.document.end)
