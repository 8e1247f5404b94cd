"""The chat app: one screen for the conversation, a modal for settings; the session's EngineLoop owns the engine."""
from __future__ import annotations

from textual.app import App
from textual.binding import Binding

from pocketcli.chat.session import ChatSession

from .engine_client import EngineClient
from .screens.chat_screen import ChatScreen


class ChatApp(App):
    TITLE = "pocket chat"
    # one stylesheet per screen; loaded by the app because Textual reads a Screen's CSS_PATH only for MODES
    CSS_PATH = ["screens/chat.tcss", "screens/settings.tcss", "screens/model_picker.tcss"]
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True)]

    def __init__(self, session: ChatSession):
        super().__init__()
        self.session = session
        self.engine = EngineClient(session)

    def get_default_screen(self) -> ChatScreen:
        screen = ChatScreen(self.session, self.engine)
        self.engine.target = screen
        return screen

    def on_mount(self) -> None:
        self.engine.open()
        self.engine.load_model()  # the engine thread starts here, with this thread's numba thread count (--threads)

    async def action_quit(self) -> None:
        self.engine.close()
        self.exit()

    def on_unmount(self) -> None:
        self.engine.close()


def make_app(session: ChatSession | None = None, **session_options) -> ChatApp:
    """The chat app for `session`, or for a new ChatSession(**session_options) (model=..., settings=...)."""
    return ChatApp(session or ChatSession(**session_options))


def run_chat_app(session: ChatSession) -> int:
    """`pocket chat`'s entry into the app (named by pocketcli.commands.chat.CHAT_APP): run until the user quits."""
    make_app(session=session).run()
    return 0
