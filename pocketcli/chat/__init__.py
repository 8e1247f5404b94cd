"""Chat sessions shared by `pocket chat --plain` and the Textual app: conversation trees, the store,
settings, slash commands."""
from .conversation import Conversation, Turn
from .session import ChatSession, ChatSettings
from .store import ConversationStore

__all__ = ["ChatSession", "ChatSettings", "Conversation", "ConversationStore", "Turn"]
