"""The history database's upgrades: a file written by the schema-1 code opens with everything
in it, the copy kept beside it, a kill inside the upgrade loses nothing, newer files refused."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from history_fixture import FIXTURES, assert_same_chats, copy_schema1

from hearth.history import ChatStore, migrations
from hearth.history.migrations import SCHEMA_VERSION, SchemaError, backup_path

REPO = Path(__file__).resolve().parents[2]


def _version(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _schema(db: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return [tuple(r) for r in rows]
    finally:
        conn.close()


def _schema1_rows(db: Path) -> list[tuple]:
    """Every message as the schema-1 code reads it (its columns only), with its images."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT id, chat_id, parent_id, role, content, thinking, model, state, error, stats,"
            " created_at FROM messages ORDER BY id"
        ).fetchall()
        images = conn.execute("SELECT message_id, position, data FROM attachments").fetchall()
        return rows + sorted(images)
    finally:
        conn.close()


def test_the_schema1_fixture_is_what_its_script_recorded():
    record = json.loads((FIXTURES / "chats-schema1.json").read_text())
    assert record["schema"] == 1 and _version(FIXTURES / "chats-schema1.db") == 1
    assert len(record["chats"]) == 4


def test_a_schema1_database_opens_with_every_chat_branch_image_and_stat(tmp_path):
    db, record = copy_schema1(tmp_path)
    before = _schema1_rows(db)
    store = ChatStore(db)
    assert _version(db) == SCHEMA_VERSION
    assert store.recovered == 0  # the interrupted reply was already marked by the old code
    assert_same_chats(store, record)
    # the copy of the old file is kept beside it, byte for byte the old database
    bak = backup_path(db, 1)
    assert bak.name == "chats.db.v1.bak"
    assert _version(bak) == 1 and _schema1_rows(bak) == before
    # full-text search covers the old messages and titles, and follows edits after the upgrade
    sky = next(c for c in store.chats() if c.title.startswith("Why is the sky"))
    assert [h.chat_id for h in store.search("rayleigh")] == [sky.id]
    assert [h.chat_id for h in store.search("holiday")] != []
    leaf = store.path(sky.id)[-1]
    store.update_message(leaf.id, content="Mie and Rayleigh scattering")
    assert [h.chat_id for h in store.search("mie")] == [sky.id]
    # the new fields work on old chats
    store.set_chat_tools(sky.id, ["files"])
    call = {"id": "c1", "name": "files__read", "arguments": {"path": "a.txt"}}
    a = store.add_message(sky.id, leaf.id, "assistant", "", tool_calls=[call])
    t = store.add_message(sky.id, a.id, "tool", "hello", tool={"call_id": "c1", "name": "read"})
    assert store.chat(sky.id).tools == ["files"]
    assert store.message(a.id).tool_calls == [call]
    assert store.message(t.id).tool == {"call_id": "c1", "name": "read"}
    store.close()
    # the copy goes once the upgraded file has opened again
    store = ChatStore(db)
    assert not bak.exists()
    assert store.chat(sky.id).tools == ["files"]
    store.close()


def test_upgraded_and_new_files_have_the_same_schema(tmp_path):
    db, _ = copy_schema1(tmp_path / "old")
    ChatStore(db).close()
    fresh = tmp_path / "new" / "chats.db"
    ChatStore(fresh).close()
    assert _schema(db) == _schema(fresh)
    names = {name for kind, name, _ in _schema(db) if kind in ("trigger", "index")}
    assert {"messages_ai", "messages_ad", "messages_au", "chats_ai", "chats_ad"} <= names
    assert {"messages_by_parent", "chats_by_time", "attachments_by_message"} <= names
    conn = sqlite3.connect(db)
    for fts in ("messages_fts", "chats_fts"):  # raises if the index disagrees with its table
        conn.execute(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert not backup_path(fresh, 1).exists() and not backup_path(fresh, 0).exists()


def test_a_database_from_a_newer_hearth_is_refused_untouched(tmp_path):
    db, _ = copy_schema1(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")  # so that even switching it to WAL would show
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaError, match="newer Hearth .*update Hearth to open it"):
        ChatStore(db)
    assert db.read_bytes() == before
    assert not backup_path(db, SCHEMA_VERSION + 1).exists()


def test_a_failing_step_leaves_the_old_file_and_says_so(tmp_path, monkeypatch):
    db, record = copy_schema1(tmp_path)
    before = _schema1_rows(db)
    real = migrations.STEPS[1]

    def broken(conn: sqlite3.Connection) -> None:
        real.apply(conn)  # the real step's changes, then a failure
        raise sqlite3.OperationalError("disk I/O error")

    steps = list(migrations.STEPS)
    steps[1] = dataclasses.replace(steps[1], apply=broken)
    monkeypatch.setattr(migrations, "STEPS", steps)
    with pytest.raises(SchemaError, match=r"could not upgrade .* to schema 2 .*disk I/O error"):
        ChatStore(db)
    assert _version(db) == 1 and _schema1_rows(db) == before
    monkeypatch.undo()
    store = ChatStore(db)
    assert_same_chats(store, record)
    store.close()


_KILLED_INSIDE = textwrap.dedent(
    """
    import dataclasses, sys, time
    from pathlib import Path
    from hearth.history import ChatStore, migrations

    real = migrations.STEPS[1]

    def stall(conn):
        real.apply(conn)  # the step's changes are made, the transaction is still open
        print("inside the transaction", flush=True)
        time.sleep(120)

    migrations.STEPS[1] = dataclasses.replace(real, apply=stall)
    ChatStore(Path(sys.argv[1]))
    """
)


def test_a_kill_inside_the_upgrade_leaves_the_old_database_usable(tmp_path):
    db, record = copy_schema1(tmp_path)
    before = _schema1_rows(db)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_INSIDE, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip() == "inside the transaction", proc.stderr.read() if proc.stderr else ""
        # the upgrade really holds an open write transaction when the kill comes
        probe = sqlite3.connect(db, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")
        probe.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # the old database: schema 1, every row as the old code reads it, intact
    assert _version(db) == 1 and _schema1_rows(db) == before
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    columns = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
    assert "tool_calls" not in columns
    conn.close()
    assert _schema1_rows(backup_path(db, 1)) == before
    # the next open upgrades it, losing nothing
    store = ChatStore(db)
    assert _version(db) == SCHEMA_VERSION
    assert_same_chats(store, record)
    store.close()


def test_no_copy_means_no_upgrade(tmp_path):
    db, record = copy_schema1(tmp_path)
    before = _schema1_rows(db)
    blocker = backup_path(db, 1)  # the copy cannot be put where it goes
    blocker.mkdir()
    (blocker / "something").write_text("x")
    with pytest.raises(SchemaError, match=r"could not copy .* before upgrading.*nothing was"):
        ChatStore(db)
    assert _version(db) == 1 and _schema1_rows(db) == before
    assert list(tmp_path.glob("*.partial")) == []  # no half copy left behind
    blocker.joinpath("something").unlink()
    blocker.rmdir()
    store = ChatStore(db)
    assert_same_chats(store, record)
    assert blocker.is_file()
    store.close()


def _schema3_with_a_document(db: Path) -> None:
    """A file at schema 3 (the released steps 1-3, which are the schema's only definition)
    holding a chat whose question carries a PDF with two passages, one cited by the reply."""
    conn = sqlite3.connect(db, isolation_level=None)
    for step in migrations.STEPS[:3]:
        conn.execute("BEGIN")
        step.apply(conn)
        conn.execute(f"PRAGMA user_version={step.version}")
        conn.execute("COMMIT")
    conn.executescript(
        """
        INSERT INTO chats(id, title, model, created_at, updated_at) VALUES (1, 'Roof', 'm', 1, 1);
        INSERT INTO messages(id, chat_id, parent_id, role, content, created_at)
            VALUES (1, 1, NULL, 'user', 'Is the roof sound?', 1),
                   (2, 1, 1, 'assistant', 'Yes [1].', 2);
        INSERT INTO documents(id, message_id, position, name, kind, pages, sections, chars,
                              mode, created_at)
            VALUES (1, 1, 0, 'inspection.pdf', 'pdf', 2, 2, 60, 'searched', 1);
        INSERT INTO document_chunks(id, document_id, position, section, text)
            VALUES (1, 1, 0, 'page 1', 'The roof is sound and the gutters were cleaned.'),
                   (2, 1, 1, 'page 2', 'The cellar is damp.');
        INSERT INTO message_sources(message_id, position, chunk_id, number) VALUES (1, 0, 1, 1);
        """
    )
    conn.close()


def test_a_schema3_file_with_documents_gains_passage_origins(tmp_path):
    from hearth.documents import ChatDocuments

    db = tmp_path / "chats.db"
    _schema3_with_a_document(db)
    assert _version(db) == 3
    store = ChatStore(db)
    assert _version(db) == SCHEMA_VERSION >= 4
    assert _version(backup_path(db, 3)) == 3
    docs = ChatDocuments(store)
    (cited,) = docs.citations(1)
    assert (cited.label(), cited.origin, cited.number) == ("inspection.pdf, page 1", "", 1)
    assert [(s, o) for _i, s, _t, o in docs.index.chunks(1)] == [("page 1", ""), ("page 2", "")]
    assert [h.chunk_id for h in docs.index.search([1], "gutters")] == [1]  # FTS kept
    store.close()
    assert _schema(db) == _schema_of_new_file(tmp_path / "new")


def _schema_of_new_file(folder: Path) -> list[tuple[str, str, str]]:
    folder.mkdir()
    ChatStore(folder / "chats.db").close()
    return _schema(folder / "chats.db")
