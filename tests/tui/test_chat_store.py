"""Conversation trees and the atomic JSON store."""
import json

from pocketcli.chat.conversation import Conversation
from pocketcli.chat.store import ConversationStore


def make_branched() -> tuple[Conversation, str, str]:
    conversation = Conversation()
    first = conversation.add("user", "first question")
    conversation.add("assistant", "first answer")
    conversation.add("user", "follow up")
    conversation.add("assistant", "answer A")
    edited = conversation.add("user", "edited first question", parent_id=first.parent_id)
    conversation.add("assistant", "answer B")
    return conversation, first.id, edited.id


def test_edit_keeps_old_branch_and_switches_back():
    conversation, first_id, edited_id = make_branched()
    assert [t.content for t in conversation.path()] == ["edited first question", "answer B"]
    assert conversation.branch_position(edited_id) == (2, 2)
    conversation.switch_branch(edited_id, -1)
    assert [t.content for t in conversation.path()] == ["first question", "first answer", "follow up", "answer A"]
    assert conversation.messages()[0] == {"role": "user", "content": "first question"}


def test_store_roundtrip_list_search_delete(tmp_path):
    store = ConversationStore(tmp_path)
    conversation, _, _ = make_branched()
    conversation.system = "be brief"
    store.save(conversation)
    other = Conversation()
    other.add("user", "something about cats")
    store.save(other)
    loaded = store.load(conversation.id)
    assert loaded.to_dict() == conversation.to_dict()
    assert [c.id for c in store.list("cats")] == [other.id]
    assert store.find("1").id == other.id and store.find(conversation.id[:6]).id == conversation.id
    assert "## System" in loaded.to_markdown() and "answer B" in loaded.to_markdown()
    store.delete(other.id)
    assert [c.id for c in store.list()] == [conversation.id]
    assert not list(tmp_path.glob("*.tmp"))  # no temp files left behind


def test_unreadable_file_is_skipped(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    conversation = Conversation()
    conversation.add("user", "hi")
    ConversationStore(tmp_path).save(conversation)
    assert [c.id for c in ConversationStore(tmp_path).list()] == [conversation.id]
    assert json.loads((tmp_path / f"{conversation.id}.json").read_text())["title"] == "hi"
