"""Opening the history database: schema, pragmas, and recovery after a kill."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["open_database", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    title_auto INTEGER NOT NULL DEFAULT 1,
    model TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    options TEXT NOT NULL DEFAULT '{}',
    current_leaf INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    thinking TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT 'done',
    error TEXT NOT NULL DEFAULT '',
    stats TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(chat_id, parent_id);
CREATE INDEX IF NOT EXISTS chats_by_time ON chats(updated_at);
CREATE TABLE IF NOT EXISTS attachments (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS attachments_by_message ON attachments(message_id);
"""


def _fts_index(table: str, column: str) -> str:
    """SQL for a full-text index `<table>_fts` over `<table>.<column>`, kept in step by triggers.

    The index uses external content (`content=<table>`), so the text is not stored twice; the
    price is that SQLite does not maintain it: the triggers mirror every insert, delete and
    update of the column, and a removal must pass the old text (FTS5's 'delete' command) so the
    index can find the terms to drop.
    """
    fts = f"{table}_fts"
    return f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(
    {column}, content='{table}', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON {table} BEGIN
    INSERT INTO {fts}(rowid, {column}) VALUES (new.id, new.{column});
END;
CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON {table} BEGIN
    INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.id, old.{column});
END;
CREATE TRIGGER IF NOT EXISTS {table}_au AFTER UPDATE OF {column} ON {table} BEGIN
    INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.id, old.{column});
    INSERT INTO {fts}(rowid, {column}) VALUES (new.id, new.{column});
END;
"""


# Full-text search over message text and chat titles.
_SCHEMA = _TABLES + _fts_index("messages", "content") + _fts_index("chats", "title")


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the history database in WAL mode.

    WAL with synchronous=NORMAL makes each committed transaction survive a killed process, which
    is what keeps a half-streamed reply: the chat controller commits every chunk it shows.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # The GUI thread owns the connection; isolation_level=None so transactions are explicit.
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=10)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        conn.close()
        raise RuntimeError(
            f"{path} was written by a newer Hearth (schema {version}); update Hearth to open it"
        )
    conn.executescript("BEGIN;" + _SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
    return conn
