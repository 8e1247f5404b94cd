"""The side panel: saved conversations, newest first, filtered by a search box."""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Label, ListItem, ListView

from pocketcli.chat.store import ConversationStore


class ConversationList(Vertical):
    @dataclass
    class Opened(Message):
        conversation_id: str

    def __init__(self, store: ConversationStore, **kwargs):
        super().__init__(**kwargs)
        self.store = store

    def compose(self) -> ComposeResult:
        yield Input(placeholder="Search chats", id="search")
        yield ListView(id="conversations")

    async def on_mount(self) -> None:
        await self.refresh_list()

    async def refresh_list(self, current_id: str | None = None) -> None:
        conversations = self.store.list(self.query_one("#search", Input).value.strip())
        list_view = self.query_one("#conversations", ListView)
        await list_view.clear()
        await list_view.extend(ListItem(Label(c.title or "(untitled)"), name=c.id) for c in conversations)
        ids = [c.id for c in conversations]
        list_view.index = ids.index(current_id) if current_id in ids else (0 if ids else None)

    async def on_input_changed(self, event: Input.Changed) -> None:
        await self.refresh_list()

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if event.item is not None and event.item.name:
            self.post_message(self.Opened(event.item.name))
