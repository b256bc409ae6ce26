"""Opening the history database: pragmas, the schema upgrade, and recovery after a kill."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .migrations import SCHEMA_VERSION, SchemaError, drop_backups, refuse_newer, upgrade

__all__ = ["transaction", "open_database", "SCHEMA_VERSION", "SchemaError"]


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the history database in WAL mode, at this Hearth's schema.

    WAL with synchronous=NORMAL makes each committed transaction survive a killed process, which
    is what keeps a half-streamed reply: the chat controller commits every chunk it shows.
    An older file is upgraded (migrations.upgrade: a copy kept beside it, one transaction per
    step); the copy is removed by the first open after that, which finds the file current.
    Raises SchemaError (a sentence) for a file from a newer Hearth or an upgrade that failed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # The GUI thread owns the connection; isolation_level=None so transactions are explicit.
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        refuse_newer(conn, path)  # before the first write: a newer Hearth's file stays as it is
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        found = upgrade(conn, path)
    except BaseException:
        conn.close()
        raise
    if found == SCHEMA_VERSION:
        drop_backups(path)
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on a connection opened by `open_database` (explicit
    transactions): BEGIN IMMEDIATE, COMMIT on leaving, ROLLBACK on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
