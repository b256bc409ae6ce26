"""Whole chats added at once (an import, `ChatStore.add_chats`): each chat, its messages
(parents first), images, attached documents with their passages and vectors, and reply
sources, under new ids, inside the caller's transaction; anything that names a message not
in its chat is a ValueError, and the caller's rollback leaves the history as it was.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from .chat_rows import insert_images
from .document_tables import insert_documents, insert_sources
from .records import ChatRecord

__all__ = ["insert_chats"]


def insert_chats(db: sqlite3.Connection, chats: Sequence[ChatRecord]) -> list[int]:
    """Add whole chats (an import) in `db`'s transaction, under new ids; return the new ids.

    Everything a chat and its messages hold is kept (times, states, titles, tools, images,
    documents with their chunks and vectors, sources) but ids: a chat's `current_leaf`,
    each message's `parent_id` and the keys of `documents` and `sources` name messages of
    the same list, which must come parents first; they are mapped to the new ids. Raises
    ValueError if a parent, the current leaf, a document's message or a source's passage is
    not in the list (the caller's transaction then rolls back, adding nothing). Nothing
    already stored is changed.
    """
    new_ids = []
    for record in chats:
        chat, messages = record.chat, record.messages
        cur = db.execute(
            "INSERT INTO chats(title, title_auto, model, system_prompt, options, tools,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                chat.title,
                int(chat.title_auto),
                chat.model,
                chat.system_prompt,
                json.dumps(chat.options),
                json.dumps(chat.tools),
                chat.created_at,
                chat.updated_at,
            ),
        )
        chat_id = int(cur.lastrowid or 0)
        ids: dict[int, int] = {}
        for m in messages:
            if m.parent_id is not None and m.parent_id not in ids:
                raise ValueError(
                    f"message {m.id} of chat {chat.title!r} answers message"
                    f" {m.parent_id}, which is not before it in the chat"
                )
            cur = db.execute(
                "INSERT INTO messages(chat_id, parent_id, role, content, thinking, model,"
                " state, error, stats, tool_calls, tool, covers, compare, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    None if m.parent_id is None else ids[m.parent_id],
                    m.role,
                    m.content,
                    m.thinking,
                    m.model,
                    m.state,
                    m.error,
                    json.dumps(m.stats),
                    json.dumps(m.tool_calls),
                    json.dumps(m.tool),
                    m.covers,
                    m.compare,
                    m.created_at,
                ),
            )
            ids[m.id] = int(cur.lastrowid or 0)
            insert_images(db, ids[m.id], m.images)
        chunk_ids = {}
        for number, documents in record.documents.items():
            if number not in ids:
                raise ValueError(
                    f"chat {chat.title!r} attaches documents to message {number},"
                    " which is not one of its messages"
                )
            chunk_ids[number] = insert_documents(db, ids[number], documents)
        for number, sources in record.sources.items():
            if number not in ids:
                raise ValueError(
                    f"chat {chat.title!r} gives sources to message {number},"
                    " which is not one of its messages"
                )
            try:
                insert_sources(db, ids[number], sources, chunk_ids)
            except ValueError as e:
                raise ValueError(f"chat {chat.title!r}, message {number}: {e}") from None
        if chat.current_leaf is not None:
            if chat.current_leaf not in ids:
                raise ValueError(
                    f"chat {chat.title!r} shows message {chat.current_leaf},"
                    " which is not one of its messages"
                )
            db.execute(
                "UPDATE chats SET current_leaf=? WHERE id=?",
                (ids[chat.current_leaf], chat_id),
            )
        new_ids.append(chat_id)
    return new_ids
