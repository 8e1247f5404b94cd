"""A snapshot of the main screen at a fixed size: a saved chat (Markdown with a code block) reopened."""
from pocketcli.chat.conversation import Conversation
from pocketcli.chat.session import ChatSession, ChatSettings, EngineOptions
from pocketcli.chat.store import ConversationStore
from tui import make_app
from tui.screens.chat_screen import ChatScreen


def test_main_screen(snap_compare, tiny_model, data_dir):
    conversation = Conversation(id="snapshot0001", title="Print in Python", created=0.0, updated=0.0)
    conversation.add("user", "How do I print in **Python**?")
    conversation.add("assistant", "Use `print`:\n\n```python\nprint('hello')\n```\n\n- one\n- two")
    store = ConversationStore()
    store.save(conversation)
    session = ChatSession(model=tiny_model, settings=ChatSettings(temperature=0), store=store,
                          engine_options=EngineOptions(ctx_size=2048))
    session.open("snapshot0001")

    async def wait_for_model(pilot):
        while not isinstance(pilot.app.screen, ChatScreen) or pilot.app.screen.model_loading:
            await pilot.pause(0.02)
        await pilot.pause()

    assert snap_compare(make_app(session=session), terminal_size=(100, 30), run_before=wait_for_model)
