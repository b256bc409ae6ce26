"""Chat history: SQLite (WAL) in the data folder, chats stored as message trees, FTS5 search."""

from .chat_store import ChatStore
from .records import Chat, Message, SearchHit

__all__ = ["Chat", "ChatStore", "Message", "SearchHit"]
