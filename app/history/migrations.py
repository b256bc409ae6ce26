"""The history database's schema, as an ordered list of steps, and the upgrade that runs them.

Every schema the database has had is a step N-1 -> N here, in order, and the list is the only
definition of the schema: a new file runs every step, an old one the steps it lacks, so both
end with the same tables, indexes and triggers. `PRAGMA user_version` says which step a file
has reached. A step is never edited once released; a change is a new step appended at the end.

Upgrading a file that holds chats (`upgrade`):
- first a copy of it, `<name>.v<N>.bak` beside it (SQLite's online backup API, written to a
  temporary name and renamed, so a kill leaves no half copy under the real name);
- then each step in its own transaction (BEGIN IMMEDIATE ... user_version=N ... COMMIT), with
  foreign keys off while it runs and checked before it commits, so a kill or an error at any
  point leaves the file at the last whole step, still readable by the Hearth that wrote it;
- the copy stays until the upgraded file has been opened once more (`drop_backups`, called by
  the next open at the current schema), then it is removed.
A file from a newer Hearth (user_version above the last step) is refused with a sentence.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "STEPS",
    "SCHEMA_VERSION",
    "Step",
    "SchemaError",
    "backup_path",
    "refuse_newer",
    "drop_backups",
    "schema_version",
    "sql_script",
    "upgrade",
]


class SchemaError(RuntimeError):
    """The file cannot be opened at this Hearth's schema; the message is a sentence for users."""


@dataclass(frozen=True)
class Step:
    """One schema change: `apply` takes a file at `version - 1` to `version`.

    `apply` runs inside the step's transaction and must not commit; it may rebuild tables
    (foreign keys are off while it runs and are checked before the commit).
    """

    version: int
    summary: str
    apply: Callable[[sqlite3.Connection], None]


def sql_script(script: str) -> Callable[[sqlite3.Connection], None]:
    """A step body that runs `script` statement by statement inside the caller's transaction.

    (`Connection.executescript` would commit the open transaction first, breaking the step's
    all-or-nothing promise, so the script is split with `sqlite3.complete_statement`.)
    """

    def apply(conn: sqlite3.Connection) -> None:
        statement = ""
        for line in script.splitlines(keepends=True):
            statement += line
            if sqlite3.complete_statement(statement):
                conn.execute(statement)
                statement = ""
        if statement.strip():
            raise ValueError(f"incomplete SQL at the end of a migration step: {statement!r}")

    return apply


def _fts_index(table: str, column: str, tokenize: str = "unicode61 remove_diacritics 2") -> str:
    """SQL for a full-text index `<table>_fts` over `<table>.<column>`, kept in step by triggers.

    The index uses external content (`content=<table>`), so the text is not stored twice; the
    price is that SQLite does not maintain it: the triggers mirror every insert, delete and
    update of the column, and a removal must pass the old text (FTS5's 'delete' command) so the
    index can find the terms to drop. A step that rebuilds `<table>` must recreate these
    triggers (dropping a table drops its triggers) and run `INSERT INTO <table>_fts(<table>_fts)
    VALUES('rebuild')` if the rowids change. `tokenize` is FTS5's tokenizer option.
    """
    fts = f"{table}_fts"
    return f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(
    {column}, content='{table}', content_rowid='id', tokenize='{tokenize}'
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


# Schema 1 (Hearth's first history): chats as message trees, images, full-text search over
# message text and chat titles.
_SCHEMA_1 = """
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

# Schema 2 (tools): an assistant message's tool calls as the model emitted them (JSON list of
# {"id","name","arguments"}); a role "tool" message's call record (JSON {"call_id","name",
# "server","arguments","decision","is_error","truncated","structured"}; its result text is
# `content`, its images are attachments); the MCP servers enabled for a chat (JSON list).
_SCHEMA_2 = """
ALTER TABLE messages ADD COLUMN tool_calls TEXT NOT NULL DEFAULT '[]';
ALTER TABLE messages ADD COLUMN tool TEXT NOT NULL DEFAULT '{}';
ALTER TABLE chats ADD COLUMN tools TEXT NOT NULL DEFAULT '[]';
"""

# Schema 3 (documents, hearth.documents reads and writes these):
#
# * documents: one per attached file, on the user message that carried it (deleted with it),
#   with what a chip shows (name, kind, pages, notes) and how it was sent ("whole" or "searched").
# * document_chunks: its text in passages, each with the page or section it comes from; a
#   full-text index (FTS5, Porter stemming: "costs" finds "cost") ranks them by BM25.
# * chunk_vectors: each chunk's embedding (float32, little-endian) under the model that made it.
# * message_sources: the passages a user message's prompt drew on, in order, as the reply under
#   it cites them (`number` is the passage's [n] in the prompt, 0 for a document sent whole).
_SCHEMA_3 = """
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    pages INTEGER NOT NULL DEFAULT 0,
    sections INTEGER NOT NULL DEFAULT 0,
    chars INTEGER NOT NULL DEFAULT 0,
    notes TEXT NOT NULL DEFAULT '[]',
    mode TEXT NOT NULL DEFAULT 'whole',
    sha256 TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_by_message ON documents(message_id);
CREATE TABLE IF NOT EXISTS document_chunks (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    section TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON document_chunks(document_id, position);
CREATE TABLE IF NOT EXISTS chunk_vectors (
    chunk_id INTEGER NOT NULL REFERENCES document_chunks(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (chunk_id, model)
);
CREATE TABLE IF NOT EXISTS message_sources (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    chunk_id INTEGER NOT NULL REFERENCES document_chunks(id) ON DELETE CASCADE,
    number INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (message_id, position)
);
"""

# Schema 4 (scanned pages): where a passage's text comes from: '' for the file's own text, 'image'
# for text a vision model transcribed from an image of its page (cited "read from an image of
# page N"; records.FROM_IMAGE).
_SCHEMA_4 = """
ALTER TABLE document_chunks ADD COLUMN origin TEXT NOT NULL DEFAULT '';
"""

# Schema 5 (compaction, history.compaction): a role "summary" message stands in the prompt for
# the first `covers` messages of its branch (root first); the originals stay. A summary the
# user took back has state "undone".
_SCHEMA_5 = """
ALTER TABLE messages ADD COLUMN covers INTEGER NOT NULL DEFAULT 0;
"""

# Schema 6 (Compare, ui/controllers/compare.py): a reply written side by side with another
# model's reply to the same message has its column here (1 = left, 2 = right); 0 for every
# other message. The replies of one comparison are siblings (versions) whose `compare` > 0;
# the one on the chat's current branch is the one the conversation continued with.
_SCHEMA_6 = """
ALTER TABLE messages ADD COLUMN compare INTEGER NOT NULL DEFAULT 0;
"""

STEPS: list[Step] = [
    Step(
        1,
        "chats, messages, images and full-text search",
        sql_script(_SCHEMA_1 + _fts_index("messages", "content") + _fts_index("chats", "title")),
    ),
    Step(2, "tool calls, tool results and each chat's tools", sql_script(_SCHEMA_2)),
    Step(
        3,
        "documents attached to messages, their chunks, vectors and full-text index",
        sql_script(
            _SCHEMA_3
            + _fts_index("document_chunks", "text", tokenize="porter unicode61 remove_diacritics 2")
        ),
    ),
    Step(
        4, "where each document passage's text comes from (a page's image)", sql_script(_SCHEMA_4)
    ),
    Step(5, "summaries of earlier messages (compaction)", sql_script(_SCHEMA_5)),
    Step(6, "replies of two models side by side (Compare)", sql_script(_SCHEMA_6)),
]

SCHEMA_VERSION = STEPS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; SchemaError (a sentence) if a newer Hearth wrote it.

    Reading the version changes nothing in the file, so call this before anything that
    writes (even a journal mode), to leave a newer Hearth's file exactly as it was.
    """
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        raise SchemaError(
            f"{path} was written by a newer Hearth (schema {found}); update Hearth to open it"
        )
    return found


def backup_path(path: Path, version: int) -> Path:
    """Where the copy of a schema-`version` file is kept while it is upgraded: chats.db.v1.bak."""
    return path.with_name(f"{path.name}.v{version}.bak")


def _backup(conn: sqlite3.Connection, target: Path) -> None:
    """Copy the open database to `target` (online backup: a consistent snapshot, WAL included)."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")  # one per process
    try:
        partial.unlink(missing_ok=True)
        copy = sqlite3.connect(str(partial))
        try:
            conn.backup(copy)
        finally:
            copy.close()
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def upgrade(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the open database at `path` to SCHEMA_VERSION; return the version it had.

    `conn` must be in autocommit mode (isolation_level=None). Raises SchemaError, with the file
    left as it was before the failing step, if the file is newer than this Hearth or a step
    fails. Safe against another process upgrading at the same time: each step re-reads the
    version once it holds the write lock.
    """
    found = refuse_newer(conn, path)
    if found == SCHEMA_VERSION:
        return found
    backup = None
    if found > 0:  # chats to keep; a new, empty file needs no copy
        backup = backup_path(path, found)
        try:
            _backup(conn, backup)
        except (OSError, sqlite3.Error) as e:
            raise SchemaError(
                f"Hearth could not copy {path} to {backup} before upgrading it ({e}); nothing"
                " was changed. Free some disk space (or fix the folder's permissions) and"
                " start Hearth again."
            ) from e
    for step in STEPS:
        if step.version > found:
            _run_step(conn, path, step, backup)
    return found


def _run_step(conn: sqlite3.Connection, path: Path, step: Step, backup: Path | None) -> None:
    conn.execute("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction, so set it before
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) >= step.version:  # another process did it meanwhile
                conn.execute("ROLLBACK")
                return
            step.apply(conn)
            broken = conn.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise sqlite3.IntegrityError(f"{len(broken)} rows point at missing rows")
            conn.execute(f"PRAGMA user_version={step.version}")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if not isinstance(exc, Exception):
                raise
            kept = f"; a copy of it is at {backup}" if backup else ""
            raise SchemaError(
                f"Hearth could not upgrade {path} to schema {step.version} ({step.summary}):"
                f" {exc}. The file is unchanged since schema {step.version - 1}{kept}."
            ) from exc
    finally:
        conn.execute("PRAGMA foreign_keys=ON")


def drop_backups(path: Path) -> list[Path]:
    """Remove the copies kept by earlier upgrades; call once the upgraded file has opened."""
    removed = []
    for version in range(1, SCHEMA_VERSION):
        copy = backup_path(path, version)
        with contextlib.suppress(FileNotFoundError):
            copy.unlink()
            removed.append(copy)
    return removed
