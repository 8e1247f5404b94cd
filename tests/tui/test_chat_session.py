"""ChatSession on the tiny model: replies, stop keeps the partial reply, regenerate and edit make branches,
slash commands."""
import pytest

from pocketcli.chat.session import ChatSession, ChatSettings
from pocketcli.chat.slash import run_slash
from pocketcli.chat.store import ConversationStore


@pytest.fixture
def session(tiny_model, data_dir):
    session = ChatSession(model=tiny_model, settings=ChatSettings(temperature=0, max_tokens=12),
                          store=ConversationStore(), engine_options={"ctx_size": 512, "kv_type": "f16"})
    session.load_model()
    return session


def test_reply_is_saved_with_stats(session):
    reply = session.reply("hello")
    assert reply and session.last_stats.completion_tokens == 12 and session.last_stats.finish_reason == "length"
    saved = session.store.load(session.conversation.id)
    assert [t.role for t in saved.path()] == ["user", "assistant"] and saved.path()[1].content == reply
    assert 0 < session.context_used <= session.context_size == 512


def test_stop_keeps_partial_reply(session):
    session.send("hello")
    pieces = list(session.stream_reply(should_stop=lambda: True))
    assert len(pieces) == 1
    last = session.conversation.path()[-1]
    assert last.role == "assistant" and last.finish_reason == "aborted" and last.content == pieces[0]
    assert session.reply("again")  # the engine is free again


def test_regenerate_and_edit_make_branches(session):
    first = session.reply("hello")
    session.settings = session.settings.updated(temperature=1.0, seed=7)
    session.prepare_regenerate()
    second = "".join(session.stream_reply())
    answer = session.conversation.path()[-1]
    assert session.conversation.branch_position(answer.id) == (2, 2) and second != first
    user = session.conversation.path()[0]
    session.edit(user.id, "hi instead")
    "".join(session.stream_reply())
    assert session.conversation.path()[0].content == "hi instead"
    session.switch_branch(session.conversation.path()[0].id, -1)
    assert [t.content for t in session.conversation.path()] == ["hello", second]


def test_slash_commands(session, tmp_path):
    session.reply("hello")
    assert run_slash(session, "/temp 0.3").text.endswith("0.3") and session.settings.temperature == 0.3
    assert run_slash(session, "/temp hot").action == "error"
    run_slash(session, "/system be brief")
    assert session.conversation.messages()[0] == {"role": "system", "content": "be brief"}
    assert "tok/s" in run_slash(session, "/stats").text
    run_slash(session, "/save My chat")
    exported = tmp_path / "chat.md"
    run_slash(session, f"/export {exported}")
    assert exported.read_text().startswith("# My chat")
    old_id = session.conversation.id
    assert run_slash(session, "/clear").action == "reload" and session.conversation.id != old_id
    assert "My chat" in run_slash(session, "/load").text
    assert run_slash(session, "/load My chat").action == "reload" and session.conversation.id == old_id
    assert run_slash(session, "/model").text.startswith("model: ")
    assert run_slash(session, "/nope").action == "error"
    assert "/export" in run_slash(session, "/help").text


def test_full_context_drops_oldest_turns_and_says_so(tiny_model, data_dir):
    session = ChatSession(model=tiny_model, settings=ChatSettings(temperature=0, max_tokens=4),
                          store=ConversationStore(), engine_options={"ctx_size": 64, "kv_type": "f16"})
    session.load_model()
    for turn in range(6):
        session.reply(f"turn {turn} " + "word " * 8)
    stats = session.last_stats
    assert stats.dropped_turns > 0 and "context full" in stats.context_note
    assert len(session.conversation.path()) == 12  # the stored conversation keeps every turn
    assert stats.prompt_tokens < 64


def test_reply_that_fits_has_no_context_note(session):
    session.reply("hello")
    assert session.last_stats.dropped_turns == 0 and session.last_stats.context_note == ""


def test_spec_acceptance_of_one_reply():
    """The engine thread counts a request's drafts (RequestStream); the reply's stats take its last chunk's."""
    from pocketcli.chat.session import PendingReply, ReplyStats
    from pocketcli.engine.outputs import GenerationChunk, GenerationStats

    reply = PendingReply(leaf=None, request=None, stats=ReplyStats())
    reply.add(GenerationChunk("a", [1, 2], "stop", GenerationStats(num_draft_tokens=10, num_accepted_draft_tokens=8)))
    assert reply.close().spec_acceptance == 0.8 and reply.stats.finish_reason == "stop"
    assert GenerationStats().draft_acceptance is None  # no drafts: no figure


def test_load_warms_the_kernels_and_compiles_the_template_once(tiny_model, data_dir, monkeypatch):
    """The first reply loads no kernel and compiles no template after Enter: the load did both (issue 28: the
    first reply within 2 s of Enter)."""
    from pocketcli.engine import warm_up as warm_up_module
    from pocketcli.tokenizer import chat_template

    warmed, compiled = [], []
    real_warm_up, real_make = warm_up_module.warm_up, chat_template.make_chat_template
    monkeypatch.setattr(warm_up_module, "warm_up", lambda engine, tokens=None: warmed.append(tokens)
                        or real_warm_up(engine, tokens))
    monkeypatch.setattr("pocketcli.tokenizer.make_chat_template",
                        lambda *args: compiled.append(1) or real_make(*args))
    session = ChatSession(model=tiny_model, settings=ChatSettings(temperature=0, max_tokens=4),
                          store=ConversationStore(), engine_options={"ctx_size": 512})
    session.load_model()
    assert warmed == [warm_up_module.CHAT_WARM_UP_TOKENS] and compiled == [1]
    assert session.engine.block_manager.num_free_blocks == session.engine.block_manager.num_blocks
    session.reply("hello")
    session.reply("again")
    assert compiled == [1]
