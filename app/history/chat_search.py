"""Full-text search over chat history (SQLite FTS5: `messages_fts` over the messages,
`chats_fts` over the titles): the user's words become a query where every word must match as
a prefix (`fts_query`), and `search_chats` gives the chats that match, newest first, each once
with a snippet of a matching message when there is one.
"""

from __future__ import annotations

import re
import sqlite3

from .records import SearchHit

__all__ = ["fts_query", "search_chats"]


def fts_query(text: str) -> str:
    """User words → an FTS5 query: every word must match, as a prefix, quotes escaped."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    return " ".join('"' + w.replace('"', '""') + '"*' for w in words)


def search_chats(conn: sqlite3.Connection, text: str, limit: int = 50) -> list[SearchHit]:
    """Chats whose title or messages contain every word of `text` (prefixes), newest first."""
    query = fts_query(text)
    if not query:
        return []
    rows = conn.execute(
        "SELECT c.id, c.title, c.updated_at, hit.snippet FROM chats c JOIN ("
        "  SELECT m.chat_id AS chat_id,"
        "   snippet(messages_fts, 0, '[', ']', '…', 10) AS snippet, rank"
        "  FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
        "  WHERE messages_fts MATCH ?"
        "  UNION ALL"
        "  SELECT chats_fts.rowid, '', rank FROM chats_fts WHERE chats_fts MATCH ?"
        ") hit ON hit.chat_id = c.id ORDER BY c.updated_at DESC, hit.rank",
        (query, query),
    ).fetchall()
    hits: dict[int, SearchHit] = {}
    for row in rows:
        hit = hits.get(row["id"])
        if hit is None:
            hits[row["id"]] = SearchHit(row["id"], row["title"], row[3], row["updated_at"])
        elif not hit.snippet and row[3]:
            hit.snippet = row[3]
    return list(hits.values())[:limit]
