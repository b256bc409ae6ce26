"""Chat history: SQLite (WAL) in the data folder, chats stored as message trees, FTS5 search."""

from .records import Chat, Message, SearchHit
from .store import ChatStore

__all__ = ["Chat", "ChatStore", "Message", "SearchHit"]
