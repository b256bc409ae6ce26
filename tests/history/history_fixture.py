"""Helpers for the history tests: a fresh copy of the committed schema-1 database, and the
field-by-field comparison of what a store reads back with what the fixture script recorded."""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from hearth.history import Chat, ChatStore, Message

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "history"


def copy_schema1(folder: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of chats-schema1.db in `folder` (as chats.db), and the record of its content."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "chats.db"
    shutil.copyfile(FIXTURES / "chats-schema1.db", db)
    return db, json.loads((FIXTURES / "chats-schema1.json").read_text())


def _defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _same(record: Any, expected: dict[str, Any], what: str, ignore: tuple[str, ...]) -> None:
    """Every field equals the recorded one; a field the record lacks (added by a later schema)
    has its default (old data has none of it)."""
    got = dataclasses.asdict(record)
    if "images" in got:
        got["images"] = [base64.b64encode(b).decode() for b in got["images"]]
    defaults = _defaults(type(record))
    for name, value in got.items():
        if name in ignore:
            continue
        want = expected[name] if name in expected else defaults[name]
        assert value == want, f"{what}: {name} is {value!r}, expected {want!r}"


def assert_same_chats(store: ChatStore, record: dict[str, Any], *, same_ids: bool = True) -> None:
    """`store` holds exactly the recorded chats, field by field, trees and paths included.

    With same_ids=False (an import) ids differ: chats are matched in order and the trees are
    compared through their shape (parent positions, the current leaf's position).
    """
    chats = store.chats()
    assert len(chats) == len(record["chats"])
    ignore = () if same_ids else ("id", "chat_id", "parent_id", "current_leaf")
    for chat, want in zip(chats, record["chats"], strict=True):
        assert isinstance(chat, Chat)
        _same(chat, want["chat"], f"chat {chat.title!r}", ignore)
        tree = store.tree(chat.id)
        assert len(tree) == len(want["messages"]), chat.title
        pos = {m.id: i for i, m in enumerate(tree)}
        want_pos = {m["id"]: i for i, m in enumerate(want["messages"])}
        for msg, m in zip(tree, want["messages"], strict=True):
            assert isinstance(msg, Message)
            _same(msg, m, f"message {m['id']} of {chat.title!r}", ignore)
            if not same_ids:
                assert (msg.parent_id is None) == (m["parent_id"] is None)
                if msg.parent_id is not None:
                    assert pos[msg.parent_id] == want_pos[m["parent_id"]]
        path = [[pos[m.id], m.version, m.versions] for m in store.path(chat.id)]
        assert path == [[want_pos[i], v, n] for i, v, n in want["path"]], chat.title
