"""ChatStore: every read and write of chat history, each write one transaction.

Chats are trees: a message's `parent_id` is the message it answers or follows, siblings are
versions (an edited question, a regenerated answer), and `chats.current_leaf` names the branch
on screen. The path root → current_leaf is the conversation the model sees.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from hearth.paths import data_dir

from .chat_import import insert_chats
from .chat_rows import chat_from_row, insert_images, message_from_row
from .chat_search import search_chats
from .db import open_database, transaction
from .records import DONE, INTERRUPTED, STREAMING, Chat, ChatRecord, Message, SearchHit

__all__ = ["ChatStore", "make_title"]

_TITLE_LEN = 48


def make_title(text: str) -> str:
    """A chat title from its first question: the first line, cut at a word boundary."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"\s+", " ", line)
    if len(line) <= _TITLE_LEN:
        return line
    cut = line[:_TITLE_LEN].rsplit(" ", 1)[0] or line[:_TITLE_LEN]
    return cut.rstrip(",.;:-") + "…"


class ChatStore:
    def __init__(self, path: Path | None = None, *, recover: bool = True) -> None:
        """Open (upgrading if needed: db.open_database) the history at `path`, by default the
        data folder's chats.db. With `recover` (the app's own store) replies left "streaming"
        by a killed app are marked interrupted; a command that only reads or adds chats while
        the app may be streaming passes recover=False."""
        self.db_path = path or data_dir() / "chats.db"
        self._conn = open_database(self.db_path)
        self.recovered = self._mark_interrupted() if recover else 0

    def close(self) -> None:
        self._conn.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The database connection, for the tables other packages own (hearth.documents)."""
        return self._conn

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self._conn)

    def _update(self, table: str, row_id: int, columns: Sequence[tuple[str, Any]]) -> None:
        """Set the given (column, value) pairs of one row of `table` in one transaction.

        A value of None means "leave unchanged" (the update methods' keyword defaults), so such
        pairs are skipped, and nothing is written when all are None. `table` and the column
        names come from this class, never from callers' data.
        """
        sets: list[str] = []
        args: list[Any] = []
        for column, value in columns:
            if value is not None:
                sets.append(f"{column}=?")
                args.append(value)
        if sets:
            with self._tx() as db:
                db.execute(f"UPDATE {table} SET {', '.join(sets)} WHERE id=?", (*args, row_id))

    def _mark_interrupted(self) -> int:
        """Replies still 'streaming' were cut off by a kill or crash: keep them, say so."""
        with self._tx() as db:
            cur = db.execute("UPDATE messages SET state=? WHERE state=?", (INTERRUPTED, STREAMING))
            return cur.rowcount

    # -- chats -------------------------------------------------------------------------------

    def create_chat(
        self, model: str, title: str = "", system_prompt: str = "", tools: Sequence[str] = ()
    ) -> Chat:
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO chats(title, model, system_prompt, tools, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (title, model, system_prompt, json.dumps(list(tools)), now, now),
            )
        chat = self.chat(int(cur.lastrowid or 0))
        assert chat is not None
        return chat

    def chat(self, chat_id: int) -> Chat | None:
        row = self._conn.execute("SELECT * FROM chats WHERE id=?", (chat_id,)).fetchone()
        return chat_from_row(row) if row else None

    def chats(self) -> list[Chat]:
        """All chats, the most recently used first."""
        rows = self._conn.execute("SELECT * FROM chats ORDER BY updated_at DESC, id DESC")
        return [chat_from_row(r) for r in rows]

    def rename_chat(self, chat_id: int, title: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE chats SET title=?, title_auto=0 WHERE id=?", (title, chat_id))

    def set_auto_title(self, chat_id: int, title: str) -> bool:
        """Title a chat automatically (from its first question): only while it has no title,
        so an automatic title is set once and a user's name sticks; True if it was set."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE chats SET title=? WHERE id=? AND title_auto=1 AND title=''",
                (title, chat_id),
            )
            return cur.rowcount > 0

    def delete_chat(self, chat_id: int) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM chats WHERE id=?", (chat_id,))

    def update_chat(
        self,
        chat_id: int,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        columns = (
            ("model", model),
            ("system_prompt", system_prompt),
            ("options", None if options is None else json.dumps(options)),
        )
        self._update("chats", chat_id, columns)

    def set_chat_tools(self, chat_id: int, tools: Sequence[str]) -> None:
        """Name the MCP servers enabled for this chat (replacing the list)."""
        self._update("chats", chat_id, (("tools", json.dumps(list(tools))),))

    # -- messages ----------------------------------------------------------------------------

    def add_message(
        self,
        chat_id: int,
        parent_id: int | None,
        role: str,
        content: str = "",
        *,
        images: Sequence[bytes] = (),
        model: str = "",
        state: str = DONE,
        tool_calls: Sequence[dict[str, Any]] = (),
        tool: dict[str, Any] | None = None,
        covers: int = 0,
        compare: int = 0,
    ) -> Message:
        """Append a message under `parent_id` and make it the chat's current leaf.

        `tool_calls` (assistant) and `tool` (role "tool": the call it answers) are described on
        records.Message; a tool result's images go in `images`, as a user's do; `covers`
        (role "summary") how many messages of the branch before it the summary stands for;
        `compare` (an assistant reply of a comparison) its column, 1 or 2.
        """
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO messages(chat_id, parent_id, role, content, model, state,"
                " tool_calls, tool, covers, compare, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    parent_id,
                    role,
                    content,
                    model,
                    state,
                    json.dumps(list(tool_calls)),
                    json.dumps(tool or {}),
                    covers,
                    compare,
                    now,
                ),
            )
            mid = int(cur.lastrowid or 0)
            insert_images(db, mid, images)
            db.execute(
                "UPDATE chats SET current_leaf=?, updated_at=? WHERE id=?", (mid, now, chat_id)
            )
        msg = self.message(mid)
        assert msg is not None
        return msg

    def update_message(
        self,
        message_id: int,
        *,
        content: str | None = None,
        thinking: str | None = None,
        state: str | None = None,
        error: str | None = None,
        stats: dict[str, Any] | None = None,
        tool_calls: Sequence[dict[str, Any]] | None = None,
        tool: dict[str, Any] | None = None,
    ) -> None:
        columns = (
            ("content", content),
            ("thinking", thinking),
            ("state", state),
            ("error", error),
            ("stats", None if stats is None else json.dumps(stats)),
            ("tool_calls", None if tool_calls is None else json.dumps(list(tool_calls))),
            ("tool", None if tool is None else json.dumps(tool)),
        )
        self._update("messages", message_id, columns)

    def message(self, message_id: int) -> Message | None:
        row = self._conn.execute("SELECT * FROM messages WHERE id=?", (message_id,)).fetchone()
        return message_from_row(self._conn, row) if row else None

    def tree(self, chat_id: int) -> list[Message]:
        """Every message of a chat, all branches, oldest first (so parents before replies)."""
        rows = self._conn.execute(
            "SELECT * FROM messages WHERE chat_id=? ORDER BY id", (chat_id,)
        ).fetchall()
        return [message_from_row(self._conn, row) for row in rows]

    def add_chats(self, chats: Sequence[ChatRecord]) -> list[int]:
        """Add whole chats (an import) in one transaction, under new ids; return the new ids
        (see `chat_import.insert_chats`: ids mapped, ValueError adding nothing when a chat
        names a message it does not hold). Nothing already stored is changed."""
        with self._tx() as db:
            return insert_chats(db, chats)

    def siblings(self, message_id: int) -> list[int]:
        """Ids of a message's versions (itself included), oldest first."""
        row = self._conn.execute(
            "SELECT chat_id, parent_id FROM messages WHERE id=?", (message_id,)
        ).fetchone()
        if row is None:
            return []
        rows = self._conn.execute(
            "SELECT id FROM messages WHERE chat_id=? AND parent_id IS ? ORDER BY id",
            (row["chat_id"], row["parent_id"]),
        )
        return [r[0] for r in rows]

    def comparison(self, message_id: int) -> list[Message]:
        """The replies of the comparison `message_id` belongs to (Compare, schema 6), by
        column; empty when it is not a compared reply."""
        row = self._conn.execute(
            "SELECT chat_id, parent_id, compare FROM messages WHERE id=?", (message_id,)
        ).fetchone()
        if row is None or not row["compare"]:
            return []
        rows = self._conn.execute(
            "SELECT * FROM messages WHERE chat_id=? AND parent_id IS ? AND compare > 0"
            " ORDER BY compare, id",
            (row["chat_id"], row["parent_id"]),
        ).fetchall()
        return [message_from_row(self._conn, r) for r in rows]

    def path(self, chat_id: int) -> list[Message]:
        """The conversation on screen: root → current leaf, each with its version numbers."""
        chat = self.chat(chat_id)
        if chat is None or chat.current_leaf is None:
            return []
        rows = self._conn.execute(
            "WITH RECURSIVE up(id) AS (SELECT ? UNION ALL"
            " SELECT m.parent_id FROM messages m JOIN up ON m.id = up.id"
            " WHERE m.parent_id IS NOT NULL)"
            " SELECT m.* FROM messages m JOIN up ON m.id = up.id ORDER BY m.id",
            (chat.current_leaf,),
        ).fetchall()
        out = []
        for row in rows:
            msg = message_from_row(self._conn, row)
            sibs = self.siblings(msg.id)
            msg.version, msg.versions = sibs.index(msg.id) + 1, len(sibs)
            out.append(msg)
        return out

    def select(self, chat_id: int, message_id: int) -> None:
        """Show the branch through `message_id`, continuing down its newest replies."""
        leaf = message_id
        while True:
            row = self._conn.execute(
                "SELECT id FROM messages WHERE chat_id=? AND parent_id=? ORDER BY id DESC LIMIT 1",
                (chat_id, leaf),
            ).fetchone()
            if row is None:
                break
            leaf = row[0]
        with self._tx() as db:
            db.execute("UPDATE chats SET current_leaf=? WHERE id=?", (leaf, chat_id))

    def set_leaf(self, chat_id: int, message_id: int | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE chats SET current_leaf=? WHERE id=?", (message_id, chat_id))

    # -- search ------------------------------------------------------------------------------

    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Chats whose title or messages contain every word of `text` (prefixes), newest first."""
        return search_chats(self._conn, text, limit)
