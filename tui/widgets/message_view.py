"""One turn of the conversation: a header (role, branch position), a collapsed `<think>` section for reasoning
models, and the text as Markdown. A live reply streams into it through `start_stream`/`append`/`end_stream`."""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Collapsible, Markdown, Static

from pocketcli.chat.conversation import Turn
from pocketcli.chat.thinking import ThinkingSplit, split_thinking, thinking_title


class MessageView(Vertical, can_focus=True):
    BINDINGS = [
        Binding("e", "edit", "Edit turn"),
        Binding("left", "branch(-1)", "Prev branch"),
        Binding("right", "branch(1)", "Next branch"),
        Binding("t", "toggle_thinking", "Thinking", show=False),
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
        self.reply_text = ""  # a live reply: everything streamed so far
        self._stream = None
        self._shown_answer = ""

    def compose(self) -> ComposeResult:
        split = self.split(self.turn.content if self.turn else "")
        yield Static(self.header(), classes="header")
        section = Collapsible(Static(split.thinking or "", markup=False, classes="thinking-text"),
                              title=thinking_title(split), collapsed=True, classes="thinking")
        section.display = split.thinking is not None
        yield section
        yield Markdown(split.answer)

    def split(self, text: str, streaming: bool = False) -> ThinkingSplit:
        if self.role != "assistant":
            return ThinkingSplit(None, text)
        return split_thinking(text, streaming=streaming)

    def header(self) -> str:
        name = "You" if self.role == "user" else "Assistant"
        index, count = self.branch
        branch = f"  ‹ {index}/{count} ›" if count > 1 else ""
        stopped = "  (stopped)" if self.turn and self.turn.finish_reason == "aborted" else ""
        return f"{name}{branch}{stopped}"

    @property
    def markdown(self) -> Markdown:
        return self.query_one(Markdown)

    @property
    def thinking(self) -> Collapsible:
        return self.query_one(Collapsible)

    # --- a live reply --------------------------------------------------------------------------------------
    def start_stream(self) -> None:
        self._stream = Markdown.get_stream(self.markdown)

    async def append(self, text: str) -> None:
        """Adds streamed text: thinking goes to the collapsed section, the answer streams as Markdown."""
        self.reply_text += text
        split = self.split(self.reply_text, streaming=True)
        self.show_thinking(split)
        if split.answer.startswith(self._shown_answer):
            await self._stream.write(split.answer[len(self._shown_answer):])
        else:  # what looked like answer was thinking after all (`</think>` with no `<think>`): redraw
            await self._stream.stop()
            await self.markdown.update(split.answer)
            self.start_stream()
        self._shown_answer = split.answer

    async def end_stream(self) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None

    def show_thinking(self, split: ThinkingSplit) -> None:
        section = self.thinking
        section.display = split.thinking is not None
        if split.thinking is not None:
            section.title = thinking_title(split)
            section.query_one(".thinking-text", Static).update(split.thinking)

    # --- actions -----------------------------------------------------------------------------------------
    def action_edit(self) -> None:
        if self.turn and self.role == "user":
            self.post_message(self.EditRequested(self.turn.id))

    def action_branch(self, offset: int) -> None:
        if self.turn and self.branch[1] > 1:
            self.post_message(self.BranchRequested(self.turn.id, offset))

    def action_toggle_thinking(self) -> None:
        if self.thinking.display:
            self.thinking.collapsed = not self.thinking.collapsed
