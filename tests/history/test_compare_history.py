"""Compare in the history (schema 6): the replies of two models to one question are siblings
marked by column; a schema-5 file gains the column with every message unmarked; the JSON
export keeps the marks and the branch the chat went on with, and imports them back; a file
without marks (an older Hearth's) imports as plain versions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from hearth.history import ChatStore, migrations
from hearth.history.export import chats_from_json, chats_to_json
from hearth.history.export_markdown import chats_to_markdown
from hearth.history.migrations import SCHEMA_VERSION, backup_path


def _compared_chat(store: ChatStore) -> tuple[int, list[int]]:
    """A question answered side by side by two models, the chat continued on the right one."""
    chat = store.create_chat("left:1b", title="Sky")
    q = store.add_message(chat.id, None, "user", "Name a colour of the sky.")
    left = store.add_message(chat.id, q.id, "assistant", "Blue.", model="left:1b", compare=1)
    right = store.add_message(chat.id, q.id, "assistant", "Grey.", model="right:1b", compare=2)
    store.update_message(right.id, stats={"eval_count": 2, "tokens_per_second": 40.0})
    regenerated = store.add_message(chat.id, q.id, "assistant", "Azure.", model="left:1b")
    store.select(chat.id, right.id)
    q2 = store.add_message(chat.id, right.id, "user", "Why?")
    store.add_message(chat.id, q2.id, "assistant", "Clouds.", model="right:1b")
    return chat.id, [left.id, right.id, regenerated.id]


def test_a_comparison_is_its_siblings_marked_by_column(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    chat_id, (left, right, regenerated) = _compared_chat(store)
    assert [m.id for m in store.comparison(left)] == [left, right]
    assert [m.id for m in store.comparison(right)] == [left, right]
    assert store.comparison(regenerated) == []  # a version, not part of the comparison
    assert store.siblings(left) == [left, right, regenerated]
    path = store.path(chat_id)
    assert [m.content for m in path] == ["Name a colour of the sky.", "Grey.", "Why?", "Clouds."]
    assert [m.compare for m in path] == [0, 2, 0, 0]
    store.close()


def test_the_export_keeps_both_replies_and_the_branch_continued(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    chat_id, (left, right, _regenerated) = _compared_chat(store)
    data = json.loads(json.dumps(chats_to_json(store, [chat_id])))
    messages = data["chats"][0]["messages"]
    assert [(m["content"], m.get("compare")) for m in messages if m["role"] == "assistant"] == [
        ("Blue.", 1),
        ("Grey.", 2),
        ("Azure.", None),  # written only where not 0
        ("Clouds.", None),
    ]
    (new_id,) = store.add_chats(chats_from_json(data, "export.json"))
    path = store.path(new_id)
    assert [m.content for m in path] == ["Name a colour of the sky.", "Grey.", "Why?", "Clouds."]
    imported = store.comparison(path[1].id)
    assert [(m.content, m.model, m.compare) for m in imported] == [
        ("Blue.", "left:1b", 1),
        ("Grey.", "right:1b", 2),
    ]
    assert imported[1].stats == {"eval_count": 2, "tokens_per_second": 40.0}
    # an export without the marks (an older Hearth's): the replies are plain versions
    for m in data["chats"][0]["messages"]:
        m.pop("compare", None)
    (plain_id,) = store.add_chats(chats_from_json(data, "old.json"))
    plain = store.path(plain_id)
    assert plain[1].compare == 0 and plain[1].versions == 3
    assert store.comparison(plain[1].id) == []
    store.close()


def test_markdown_names_the_reply_not_continued(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    chat_id, _ids = _compared_chat(store)
    text = chats_to_markdown(store, [chat_id])
    assert "Grey." in text and "Clouds." in text
    assert "Compared with left:1b" in text and "Blue." in text
    assert "Azure." not in text  # a version of the reply, not part of the comparison
    store.close()


def test_a_schema5_file_gains_the_compare_column(tmp_path):
    db = tmp_path / "chats.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for step in migrations.STEPS[:5]:
        conn.execute("BEGIN")
        step.apply(conn)
        conn.execute(f"PRAGMA user_version={step.version}")
        conn.execute("COMMIT")
    conn.executescript(
        """
        INSERT INTO chats(id, title, model, current_leaf, created_at, updated_at)
            VALUES (1, 'Sky', 'm', 3, 1, 1);
        INSERT INTO messages(id, chat_id, parent_id, role, content, created_at)
            VALUES (1, 1, NULL, 'user', 'Colour of the sky?', 1),
                   (2, 1, 1, 'assistant', 'Blue.', 2),
                   (3, 1, 1, 'assistant', 'Grey.', 3);
        """
    )
    conn.close()
    store = ChatStore(db)
    assert store.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 6
    assert backup_path(db, 5).exists()
    path = store.path(1)
    assert [(m.content, m.compare, m.versions) for m in path] == [
        ("Colour of the sky?", 0, 1),
        ("Grey.", 0, 2),
    ]
    assert store.comparison(3) == []
    store.close()
    assert not ChatStore(Path(db)).close()  # opened once more: the copy is dropped
    assert not backup_path(db, 5).exists()
