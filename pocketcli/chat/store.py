"""Conversations on disk: one JSON file each, written atomically (temp file + fsync + os.replace),
so a kill -9 mid-write leaves the previous version intact."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..paths import conversations_dir
from .conversation import Conversation


class ConversationStore:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else conversations_dir()

    def path_of(self, conversation_id: str) -> Path:
        return self.root / f"{conversation_id}.json"

    def save(self, conversation: Conversation) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return write_atomic(self.path_of(conversation.id), json.dumps(conversation.to_dict(), ensure_ascii=False))

    def load(self, conversation_id: str) -> Conversation:
        try:
            return Conversation.from_dict(json.loads(self.path_of(conversation_id).read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise KeyError(f"no saved conversation '{conversation_id}'") from None

    def delete(self, conversation_id: str) -> None:
        self.path_of(conversation_id).unlink(missing_ok=True)

    def list(self, query: str = "") -> list[Conversation]:
        """Saved conversations, most recently updated first; unreadable files are skipped."""
        conversations = []
        for path in self.root.glob("*.json") if self.root.is_dir() else ():
            try:
                conversation = Conversation.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if not query or conversation.matches(query):
                conversations.append(conversation)
        return sorted(conversations, key=lambda c: c.updated, reverse=True)

    def find(self, key: str) -> Conversation:
        """A conversation by id, id prefix, 1-based index in `list()`, or title (case-insensitive)."""
        conversations = self.list()
        if key.isdigit() and 1 <= int(key) <= len(conversations):
            return conversations[int(key) - 1]
        for match in (lambda c: c.id == key, lambda c: c.id.startswith(key),
                      lambda c: c.title.lower() == key.lower()):
            found = [c for c in conversations if match(c)]
            if found:
                return found[0]
        raise KeyError(f"no saved conversation matches '{key}'")


def write_atomic(path: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
