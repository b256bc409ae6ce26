"""Chat history: SQLite (WAL) in the data folder, chats stored as message trees, FTS5 search;
the schema upgraded by ordered migration steps (migrations.py); export and import (export.py)."""

from .chat_store import ChatStore
from .migrations import SCHEMA_VERSION, SchemaError
from .records import Chat, Message, SearchHit

__all__ = ["Chat", "ChatStore", "Message", "SCHEMA_VERSION", "SchemaError", "SearchHit"]
