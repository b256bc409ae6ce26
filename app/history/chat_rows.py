"""Chat history rows <-> records: a `Chat` or a `Message` (its images with it) from its row,
and a message's images written as its attachments. The JSON columns (options, tools, stats,
tool_calls, tool) are decoded here, empty when NULL; the one place that knows the columns of
`chats` and `messages` as they are read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from .records import Chat, Message

__all__ = ["chat_from_row", "insert_images", "message_from_row"]


def chat_from_row(row: sqlite3.Row) -> Chat:
    """A `Chat` from its row of `chats`."""
    return Chat(
        id=row["id"],
        title=row["title"],
        model=row["model"],
        system_prompt=row["system_prompt"],
        options=json.loads(row["options"] or "{}"),
        current_leaf=row["current_leaf"],
        title_auto=bool(row["title_auto"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        tools=json.loads(row["tools"] or "[]"),
    )


def message_from_row(conn: sqlite3.Connection, row: sqlite3.Row) -> Message:
    """A `Message` from its row of `messages`, with its images (attachments)."""
    images = [
        bytes(r[0])
        for r in conn.execute(
            "SELECT data FROM attachments WHERE message_id=? ORDER BY position", (row["id"],)
        )
    ]
    return Message(
        id=row["id"],
        chat_id=row["chat_id"],
        parent_id=row["parent_id"],
        role=row["role"],
        content=row["content"],
        thinking=row["thinking"],
        model=row["model"],
        state=row["state"],
        error=row["error"],
        stats=json.loads(row["stats"] or "{}"),
        created_at=row["created_at"],
        images=images,
        tool_calls=json.loads(row["tool_calls"] or "[]"),
        tool=json.loads(row["tool"] or "{}"),
        covers=row["covers"],
        compare=row["compare"],
    )


def insert_images(db: sqlite3.Connection, message_id: int, images: Sequence[bytes]) -> None:
    """Store `images` as the attachments of `message_id`, in order."""
    db.executemany(
        "INSERT INTO attachments(message_id, position, data) VALUES (?, ?, ?)",
        [(message_id, i, sqlite3.Binary(data)) for i, data in enumerate(images)],
    )
