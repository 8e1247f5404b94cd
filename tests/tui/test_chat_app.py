"""The Textual chat app driven by Pilot on the tiny model: streaming, Esc, regenerate, edit + branches,
reopening a saved chat after a restart, slash commands, settings and error toasts."""
import pytest

from tests.tui.pilot import SIZE, build, headers, idle, ready, send, views
from tui.messages import ReplyChunk
from tui.widgets.chat_input import ChatInput
from tui.widgets.message_view import MessageView


def record_chunks(monkeypatch, seconds_per_token=0.0):
    """Every ReplyChunk the reply worker posts; each token of the engine's stream held seconds_per_token on the
    engine thread first (chunks coalesce ~30 ms of tokens, so only a per-token delay bounds the rate)."""
    import time

    from pocketcli.engine.request_stream import RequestStream
    from tui.engine_client import EngineClient

    posted, original_post, original_process = [], EngineClient._post, RequestStream.process

    def record(self, message):
        if isinstance(message, ReplyChunk):
            posted.append(message.text)
        original_post(self, message)

    def slow_process(self, output):
        time.sleep(seconds_per_token)
        return original_process(self, output)

    monkeypatch.setattr(EngineClient, "_post", record)
    if seconds_per_token:
        monkeypatch.setattr(RequestStream, "process", slow_process)
    return posted


@pytest.fixture
def chunks(monkeypatch):
    return record_chunks(monkeypatch)


@pytest.fixture
def slow_chunks(monkeypatch):
    """chunks from an engine held to <= 200 tokens a second: the tiny model would otherwise reach its 2000-token
    budget on a fast CPU before a key press is handled."""
    return record_chunks(monkeypatch, seconds_per_token=0.005)


async def test_prompt_streams_reply(tiny_model, data_dir, chunks):
    app = build(tiny_model, max_tokens=200)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await send(screen, pilot, "hello", typed=True)
        reply = app.session.conversation.path()[-1]
        assert views(screen) == [("user", "hello"), ("assistant", reply.content)]
        assert len(chunks) >= 1 and "".join(chunks) == reply.content
        status = str(screen.query_one("#status").render())
        assert "tiny-llama.gguf" in status and "tok/s" in status and "/2048" in status and "spec" not in status
        app.session.last_stats.spec_acceptance = 0.75  # the slot a speculative reply fills
        screen.update_status()
        assert "│ spec 75% accepted" in str(screen.query_one("#status").render())


async def test_default_model_holds_a_two_turn_conversation(chat_default_model, chunks):
    """The one test on the real chat default (SmolLM2-135M-Instruct, Q4_1, from its PyPI package): model=None
    means that default. Greedy replies answer the questions and echo neither."""
    app = build(None, max_tokens=24)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        assert app.session.engine is not None, "the default model did not load"
        for question, answer in (("What is the capital of Japan?", "Tokyo"),
                                 ("And what is the capital of France?", "Paris")):
            await send(screen, pilot, question, typed=question.startswith("What"))
            reply = app.session.conversation.path()[-1]
            assert reply.role == "assistant" and answer in reply.content and question not in reply.content
            assert views(screen)[-1] == ("assistant", reply.content)
        assert "".join(chunks) == "".join(v.turn.content for v in screen.query(MessageView) if v.role == "assistant")
        status = str(screen.query_one("#status").render())
        assert "smollm2-135m-instruct" in status and "ctx " in status and "/2048" in status


async def test_escape_stops_and_keeps_partial_reply(tiny_model, data_dir, slow_chunks):
    chunks = slow_chunks
    app = build(tiny_model, max_tokens=2000)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        screen.query_one(ChatInput).focus()
        await pilot.press(*"tell me a long story", "enter")
        while not chunks:
            await pilot.pause(0.01)
        await pilot.press("escape")
        await idle(screen, pilot)
        reply = app.session.conversation.path()[-1]
        assert reply.finish_reason == "aborted" and reply.content
        assert app.session.last_stats.completion_tokens < 2000
        assert headers(screen)[-1].endswith("(stopped)")


async def test_regenerate_then_switch_branch(tiny_model, data_dir):
    app = build(tiny_model, temperature=1.0)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await send(screen, pilot, "hello")
        first = views(screen)[-1][1]
        await pilot.press("ctrl+r")
        await idle(screen, pilot)
        assert headers(screen)[-1] == "Assistant  ‹ 2/2 ›"
        second = views(screen)[-1][1]
        list(screen.query(MessageView))[-1].focus()
        await pilot.press("left")
        await pilot.pause()
        assert headers(screen)[-1] == "Assistant  ‹ 1/2 ›" and views(screen)[-1][1] == first
        await pilot.press("right")
        await pilot.pause()
        assert views(screen)[-1][1] == second


async def test_edit_earlier_turn_and_switch_back(tiny_model, data_dir):
    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await send(screen, pilot, "hello")
        await send(screen, pilot, "more")
        original = views(screen)
        list(screen.query(MessageView))[0].focus()
        await pilot.press("e")
        prompt = screen.query_one(ChatInput)
        assert prompt.text == "hello" and prompt.has_focus
        prompt.clear()
        await pilot.press(*"bye", "enter")
        await idle(screen, pilot)
        assert [role for role, _ in views(screen)] == ["user", "assistant"]
        assert views(screen)[0] == ("user", "bye") and headers(screen)[0] == "You  ‹ 2/2 ›"
        list(screen.query(MessageView))[0].focus()
        await pilot.press("left")
        await pilot.pause()
        assert views(screen) == original


async def test_saved_chat_reopens_after_restart(tiny_model, data_dir):
    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await send(screen, pilot, "remember me")
        before = views(screen)
    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        assert views(screen) == []
        await pilot.press("ctrl+f", *"remem")
        await pilot.pause()
        screen.query_one("#conversations").focus()
        await pilot.press("enter")
        await pilot.pause()
        assert views(screen) == before


async def test_slash_commands_settings_and_error_toast(tiny_model, data_dir, tmp_path):
    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await send(screen, pilot, "/temp 0.4")
        assert app.session.settings.temperature == 0.4
        await pilot.press("ctrl+s")
        await pilot.pause()
        settings_screen = app.screen
        settings_screen.query_one("#top_p").value = "2"  # out of range: a toast, and the panel stays open
        await pilot.click("#save")
        await pilot.pause()
        assert app.screen is settings_screen and any("invalid setting" in message for _, message in app.notified)
        for field, value in {"max_tokens": "7", "system": "be brief", "temperature": "0", "top_p": "0.5",
                             "top_k": "3", "min_p": "0.1"}.items():
            settings_screen.query_one(f"#{field}").value = value
        settings_screen.query_one("#top_k").focus()
        await pilot.press("enter")  # Enter in any field saves (the toast above may cover the Save button)
        await pilot.pause()
        assert app.session.conversation.system == "be brief"
        params = app.session.settings.sampling_params()  # what the next reply samples with
        assert (params.max_tokens, params.temperature, params.top_p, params.top_k, params.min_p) == (7, 0, 0.5, 3, 0.1)
        await send(screen, pilot, "hello")
        assert app.session.last_stats.completion_tokens <= 7
        await send(screen, pilot, f"/export {tmp_path / 'chat.md'}")
        assert "## User" in (tmp_path / "chat.md").read_text()
        await send(screen, pilot, "/model /no/such/model.gguf")
        while screen.model_loading:
            await pilot.pause(0.02)
        assert any(sev == "error" and "cannot load" in m for sev, m in app.notified)
        await send(screen, pilot, "still works")  # the old model still answers
        assert views(screen)[-1][0] == "assistant" and views(screen)[-2] == ("user", "still works")


async def test_the_sessions_engine_loop_owns_the_engine(tiny_model, data_dir, monkeypatch):
    """One owner thread: the app runs no engine thread of its own and no reader thread per reply; the engine
    thread encodes the prompt and steps the reply, the app's event loop awaits the chunks; quitting stops the
    session's EngineLoop."""
    import threading

    from pocketcli.chat.session import ChatSession

    engine_threads, original_encode = set(), ChatSession._encode
    monkeypatch.setattr(ChatSession, "_encode", lambda self, messages: engine_threads.add(
        threading.current_thread().name) or original_encode(self, messages))
    app = build(tiny_model, max_tokens=8)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        assert app.session.loop.is_alive and app.session.engine is app.session.loop.engine
        assert not [worker for worker in app.workers if worker.name == "engine"]
        step = app.session.engine.step
        app.session.engine.step = lambda: engine_threads.add(threading.current_thread().name) or step()
        threads_before = {thread.name for thread in threading.enumerate()}
        await send(screen, pilot, "hello")
        assert views(screen)[-1][0] == "assistant"
        assert engine_threads == {"engine-loop"}
        new_threads = {thread.name for thread in threading.enumerate()} - threads_before
        assert all(name.startswith("asyncio_") for name in new_threads), new_threads  # Textual's Markdown parser
    app.session.loop._thread.join(30)
    assert not app.session.loop.is_alive
