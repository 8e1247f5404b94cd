"""One turn of the conversation: a header (role, branch position) and the text as Markdown."""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Markdown, Static

from pocketcli.chat.conversation import Turn


class MessageView(Vertical, can_focus=True):
    BINDINGS = [
        Binding("e", "edit", "Edit turn"),
        Binding("left", "branch(-1)", "Prev branch"),
        Binding("right", "branch(1)", "Next branch"),
    ]

    @dataclass
    class EditRequested(Message):
        turn_id: str

    @dataclass
    class BranchRequested(Message):
        turn_id: str
        offset: int

    def __init__(self, turn: Turn | None, role: str, branch: tuple[int, int] = (1, 1)):
        super().__init__(classes=role)
        self.turn = turn
        self.role = role
        self.branch = branch

    def compose(self) -> ComposeResult:
        yield Static(self.header(), classes="header")
        yield Markdown(self.turn.content if self.turn else "")

    def header(self) -> str:
        name = "You" if self.role == "user" else "Assistant"
        index, count = self.branch
        branch = f"  ‹ {index}/{count} ›" if count > 1 else ""
        stopped = "  (stopped)" if self.turn and self.turn.finish_reason == "aborted" else ""
        return f"{name}{branch}{stopped}"

    @property
    def markdown(self) -> Markdown:
        return self.query_one(Markdown)

    def action_edit(self) -> None:
        if self.turn and self.role == "user":
            self.post_message(self.EditRequested(self.turn.id))

    def action_branch(self, offset: int) -> None:
        if self.turn and self.branch[1] > 1:
            self.post_message(self.BranchRequested(self.turn.id, offset))
