"""A conversation as a tree of turns: editing a user turn or regenerating a reply adds a sibling branch,
and the active branch is the path from the root to `leaf_id`."""
from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field


def new_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass
class Turn:
    id: str
    role: str  # "user" | "assistant"
    content: str
    parent_id: str | None = None
    created: float = field(default_factory=time.time)
    finish_reason: str | None = None  # assistant turns: "stop" | "length" | "aborted"


@dataclass
class Conversation:
    id: str = field(default_factory=new_id)
    title: str = ""
    system: str = ""
    model: str = ""
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    turns: dict[str, Turn] = field(default_factory=dict)
    leaf_id: str | None = None

    # --- reading -------------------------------------------------------------------------------------
    def path(self) -> list[Turn]:
        """Turns of the active branch, oldest first."""
        turns, turn_id = [], self.leaf_id
        while turn_id is not None:
            turn = self.turns[turn_id]
            turns.append(turn)
            turn_id = turn.parent_id
        return turns[::-1]

    def children(self, parent_id: str | None) -> list[Turn]:
        return sorted((t for t in self.turns.values() if t.parent_id == parent_id), key=lambda t: t.created)

    def siblings(self, turn_id: str) -> list[Turn]:
        return self.children(self.turns[turn_id].parent_id)

    def branch_position(self, turn_id: str) -> tuple[int, int]:
        """(1-based index among siblings, number of siblings)."""
        siblings = self.siblings(turn_id)
        return [t.id for t in siblings].index(turn_id) + 1, len(siblings)

    def messages(self) -> list[dict]:
        """The active branch as chat-template messages, the system prompt first."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": t.role, "content": t.content} for t in self.path()]

    def matches(self, query: str) -> bool:
        query = query.lower()
        return query in self.title.lower() or any(query in t.content.lower() for t in self.turns.values())

    # --- changing --------------------------------------------------------------------------------------
    def add(self, role: str, content: str, parent_id: str | None = "", finish_reason: str | None = None) -> Turn:
        """Append a turn under `parent_id` (default: the active leaf) and make it the active leaf."""
        parent_id = self.leaf_id if parent_id == "" else parent_id
        # ids of siblings made in the same clock tick must still sort by creation
        created = max([time.time()] + [t.created + 1e-6 for t in self.children(parent_id)])
        turn = Turn(new_id(), role, content, parent_id, created, finish_reason)
        self.turns[turn.id] = turn
        self.leaf_id = turn.id
        if not self.title and role == "user":
            self.title = " ".join(content.split())[:60]
        self.touch()
        return turn

    def switch_branch(self, turn_id: str, offset: int) -> Turn:
        """Make the sibling `offset` steps from `turn_id` active (following its newest descendants)."""
        siblings = self.siblings(turn_id)
        index = [t.id for t in siblings].index(turn_id)
        chosen = siblings[max(0, min(len(siblings) - 1, index + offset))]
        self.leaf_id = self._newest_leaf(chosen.id)
        self.touch()
        return chosen

    def select(self, turn_id: str | None) -> None:
        """Make `turn_id` the active leaf (None: empty branch; the next turn starts a new root)."""
        self.leaf_id = turn_id
        self.touch()

    def clear(self) -> None:
        self.turns.clear()
        self.leaf_id = None
        self.touch()

    def touch(self) -> None:
        self.updated = time.time()

    def _newest_leaf(self, turn_id: str) -> str:
        while children := self.children(turn_id):
            turn_id = children[-1].id
        return turn_id

    # --- JSON ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        data = asdict(self)
        data["turns"] = [asdict(t) for t in self.turns.values()]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Conversation:
        turns = {t["id"]: Turn(**t) for t in data.get("turns", [])}
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "turns"}
        return cls(**fields, turns=turns)

    def to_markdown(self) -> str:
        lines = [f"# {self.title or 'Conversation'}", ""]
        if self.system:
            lines += ["## System", "", self.system, ""]
        for turn in self.path():
            lines += [f"## {turn.role.capitalize()}", "", turn.content, ""]
        return "\n".join(lines)
