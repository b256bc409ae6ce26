"""The chat store: trees, versions, search, titles, and recovery after a kill."""

from __future__ import annotations

import sqlite3

from hearth.history import ChatStore
from hearth.history.chat_store import make_title
from hearth.history.records import INTERRUPTED, STREAMING


def test_branches_versions_and_switching(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    chat = s.create_chat("gemma3:270m")
    q1 = s.add_message(chat.id, None, "user", "first question")
    a1 = s.add_message(chat.id, q1.id, "assistant", "first answer")
    a2 = s.add_message(chat.id, q1.id, "assistant", "regenerated answer")
    path = s.path(chat.id)
    assert [m.content for m in path] == ["first question", "regenerated answer"]
    assert (path[1].version, path[1].versions) == (2, 2)
    # an edited question is a sibling of the original, with its own reply
    q2 = s.add_message(chat.id, None, "user", "edited question")
    s.add_message(chat.id, q2.id, "assistant", "answer to the edit")
    assert [m.content for m in s.path(chat.id)] == ["edited question", "answer to the edit"]
    # going back to the original question shows its newest reply
    s.select(chat.id, q1.id)
    assert [m.content for m in s.path(chat.id)] == ["first question", "regenerated answer"]
    s.select(chat.id, a1.id)
    assert s.path(chat.id)[-1].content == "first answer"
    assert s.siblings(a2.id) == [a1.id, a2.id]


def test_search_titles_and_rename(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    sky = s.create_chat("m")
    s.set_auto_title(sky.id, make_title("Why is the sky blue?"))
    q = s.add_message(sky.id, None, "user", "Why is the sky blue?")
    s.add_message(sky.id, q.id, "assistant", "Rayleigh scattering of sunlight.")
    other = s.create_chat("m")
    s.add_message(other.id, None, "user", "A recipe for bread")
    hits = s.search("rayl")
    assert [h.chat_id for h in hits] == [sky.id]
    assert "[Rayleigh]" in hits[0].snippet
    assert [h.chat_id for h in s.search("bread recipe")] == [other.id]
    assert s.search('"; DROP TABLE chats; --') == []
    s.rename_chat(sky.id, "Colours of nature")
    assert not s.set_auto_title(sky.id, "something else")  # a user's name sticks
    assert [h.chat_id for h in s.search("nature")] == [sky.id]
    assert [c.id for c in s.chats()][0] == other.id  # newest first
    s.delete_chat(other.id)
    assert s.search("bread") == []


def test_streaming_reply_survives_a_kill(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    chat = s.create_chat("m")
    q = s.add_message(chat.id, None, "user", "hi")
    a = s.add_message(chat.id, q.id, "assistant", state=STREAMING)
    s.update_message(a.id, content="partial rep")
    # a second connection (another process) sees the committed text at once
    other = sqlite3.connect(tmp_path / "c.db")
    assert other.execute("SELECT content FROM messages WHERE id=?", (a.id,)).fetchone()[0] == (
        "partial rep"
    )
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    reopened = ChatStore(tmp_path / "c.db")
    assert reopened.recovered == 1
    msg = reopened.message(a.id)
    assert msg is not None
    assert (msg.state, msg.content) == (INTERRUPTED, "partial rep")


def test_titles_are_short_and_clean():
    assert make_title("  \n hello   world \nsecond line") == "hello world"
    long = make_title("word " * 30)
    assert len(long) <= 49 and long.endswith("…")


def test_images_are_kept_with_their_message(tmp_path):
    s = ChatStore(tmp_path / "c.db")
    chat = s.create_chat("m")
    m = s.add_message(chat.id, None, "user", "look", images=[b"\x89PNG1", b"\x89PNG2"])
    assert s.message(m.id).images == [b"\x89PNG1", b"\x89PNG2"]
