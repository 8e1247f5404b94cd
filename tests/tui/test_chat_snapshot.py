"""Snapshots at a fixed terminal size: the main screen with a saved chat reopened (Markdown with a code block,
a collapsed thinking section), the settings panel and the model picker."""
import pytest

from pocketcli.chat.conversation import Conversation
from pocketcli.chat.session import ChatSession, ChatSettings
from pocketcli.chat.store import ConversationStore
from tui import make_app
from tui.screens.chat_screen import ChatScreen

SIZE = (100, 30)


@pytest.fixture
def app(tiny_model, models_dir):
    conversation = Conversation(id="snapshot0001", title="Print in Python", created=0.0, updated=0.0)
    conversation.add("user", "How do I print in **Python**?")
    conversation.add("assistant", "<think>They want the print function.</think>\n\n"
                                  "Use `print`:\n\n```python\nprint('hello')\n```\n\n- one\n- two")
    store = ConversationStore()
    store.save(conversation)
    session = ChatSession(model=tiny_model, settings=ChatSettings(temperature=0, system="Be brief."), store=store,
                          engine_options={"ctx_size": 2048, "kv_type": "f16"})
    session.open("snapshot0001")
    return make_app(session=session)


def then_press(*keys):
    async def run_before(pilot):
        while not isinstance(pilot.app.screen, ChatScreen) or pilot.app.screen.model_loading:
            await pilot.pause(0.02)
        await pilot.press(*keys)
        await pilot.pause()
        for screen in pilot.app.screen_stack:  # a blinking cursor makes the picture random: no cursor at all
            for widget in screen.query("Input, TextArea"):
                widget.cursor_blink = False
            screen.set_focus(None)
            screen.refresh(layout=True)
        await pilot.pause()
    return run_before


def test_main_screen(snap_compare, app):
    assert snap_compare(app, terminal_size=SIZE, run_before=then_press())


def test_settings_screen(snap_compare, app):
    assert snap_compare(app, terminal_size=SIZE, run_before=then_press("ctrl+s"))


def test_model_picker_screen(snap_compare, app):
    assert snap_compare(app, terminal_size=SIZE, run_before=then_press("ctrl+t"))
