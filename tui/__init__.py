"""`pocket chat`: the Textual chat app. Build it with `make_app(...)` (tests do the same)."""
from .app import ChatApp, make_app, run_chat_app

__all__ = ["ChatApp", "make_app", "run_chat_app"]
