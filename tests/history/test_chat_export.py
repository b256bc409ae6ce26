"""Export and import of chats: JSON keeps everything (every branch, images, tool calls,
thinking, stats, options, tools) and imports into an empty home as the same chats; Markdown
shows each chat's branch for reading; the `hearth chats` commands as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from history_fixture import FIXTURES, assert_same_chats, copy_schema1
from make_history_fixture import dump, tiny_png

from hearth.history import ChatStore
from hearth.history.export import (
    EXPORT_VERSION,
    ExportError,
    chats_from_json,
    chats_to_json,
    import_file,
)
from hearth.history.export_markdown import chats_to_markdown
from hearth.history.records import INTERRUPTED, STREAMING

REPO = Path(__file__).resolve().parents[2]
CALL = {"id": "call_1", "name": "weather__forecast", "arguments": {"city": "Oslo", "days": 2}}
TOOL = {
    "call_id": "call_1",
    "name": "forecast",
    "server": "weather",
    "arguments": {"city": "Oslo", "days": 2},
    "decision": "allow_once",
    "is_error": False,
    "truncated": True,
    "structured": {"temps": [3, 5]},
}


def _add_tool_chat(store: ChatStore) -> int:
    """A chat with tools on, a tool round trip (an image in the result) and a regenerated end."""
    chat = store.create_chat("qwen3:0.6b", title="Weather", tools=["weather", "files"])
    q = store.add_message(chat.id, None, "user", "Weather in Oslo?")
    a = store.add_message(chat.id, q.id, "assistant", "", tool_calls=[CALL], model="qwen3:0.6b")
    store.update_message(a.id, thinking="I should call the forecast tool.", stats={"eval_count": 9})
    t = store.add_message(
        chat.id, a.id, "tool", "3°C then 5°C [cut at 32000 characters]", tool=TOOL,
        images=[tiny_png((0, 128, 0))],
    )  # fmt: skip
    store.add_message(chat.id, t.id, "assistant", "Cold: 3°C, then 5°C.")
    store.add_message(chat.id, t.id, "assistant", "Oslo: 3 and 5 degrees.")
    return chat.id


@pytest.fixture
def full_store(tmp_path: Path) -> ChatStore:
    """The schema-1 fixture's chats (upgraded) plus a chat with tool calls."""
    db, _ = copy_schema1(tmp_path / "source")
    store = ChatStore(db)
    _add_tool_chat(store)
    return store


def test_export_then_import_into_an_empty_home_gives_the_same_chats(full_store, tmp_path):
    record = dump(full_store)
    assert any(m["tool_calls"] for c in record["chats"] for m in c["messages"])
    path = tmp_path / "all.json"
    path.write_text(json.dumps(chats_to_json(full_store)))
    empty = ChatStore(tmp_path / "empty" / "chats.db")
    ids = import_file(empty, path)
    assert len(ids) == len(record["chats"]) == 5
    assert_same_chats(empty, record, same_ids=False)


def test_a_version_1_export_still_imports(tmp_path):
    """A file written by the export format before documents (version 1) imports as before."""
    _, record = copy_schema1(tmp_path / "fixture")
    path = FIXTURES / "chats-export-v1.json"
    assert json.loads(path.read_text())["version"] == 1 < EXPORT_VERSION
    empty = ChatStore(tmp_path / "empty" / "chats.db")
    assert len(import_file(empty, path)) == 4
    assert_same_chats(empty, record, same_ids=False)
    assert empty.connection.execute("SELECT COUNT(*) FROM documents").fetchone()[0] == 0


def test_import_adds_and_never_overwrites(full_store, tmp_path):
    before = dump(full_store)
    path = tmp_path / "all.json"
    path.write_text(json.dumps(chats_to_json(full_store)))
    new_ids = import_file(full_store, path)
    old_ids = {c["chat"]["id"] for c in before["chats"]}
    assert old_ids.isdisjoint(new_ids)
    after = dump(full_store)
    kept = [c for c in after["chats"] if c["chat"]["id"] in old_ids]
    assert kept == before["chats"]
    assert len(after["chats"]) == 2 * len(before["chats"])


def test_one_chat_is_exported_alone(full_store):
    weather = next(c for c in full_store.chats() if c.title == "Weather")
    data = chats_to_json(full_store, [weather.id])
    assert [c["title"] for c in data["chats"]] == ["Weather"]
    (imported,) = chats_from_json(data, "export")
    chat, messages = imported.chat, imported.messages
    assert chat.tools == ["weather", "files"]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "assistant"]
    assert messages[1].tool_calls == [CALL] and messages[2].tool == TOOL
    assert messages[2].images == [tiny_png((0, 128, 0))]
    assert chat.current_leaf == 5 and messages[4].parent_id == 3
    with pytest.raises(ExportError, match="there is no chat 999"):
        chats_to_json(full_store, [999])


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        (b"\xff\xfe not text", "is not a Hearth chat export: it is not UTF-8 text"),
        (b"{ nope", "is not a Hearth chat export: it is not JSON"),
        (b'{"mcpServers": {}}', "is not a Hearth chat export"),
        (b'{"format": "hearth-chats", "version": 99, "chats": []}', "newer Hearth .*format 99"),
        (b'{"format": "hearth-chats", "version": 1}', "has no list of chats"),
        (
            b'{"format": "hearth-chats", "version": 1, "chats": [{"model": "m", "title": "T",'
            b' "messages": [{"id": 1, "role": "user"}, {"id": 2, "role": 7}]}]}',
            r"chat 1 \('T'\), message 2: 'role' is a int",
        ),
        (
            b'{"format": "hearth-chats", "version": 1, "chats": [{"model": "m",'
            b' "messages": [{"id": 1, "parent_id": 5, "role": "user"}]}]}',
            "message 1 answers message 5, missing",
        ),
        (
            b'{"format": "hearth-chats", "version": 1, "chats": [{"model": "m",'
            b' "messages": [{"id": 1, "role": "user", "images": ["not base64!"]}]}]}',
            "image 1 is not base64",
        ),
        (
            b'{"format": "hearth-chats", "version": 1, "chats": [{"model": "m",'
            b' "messages": [{"id": 1, "role": "user", "state": "exploded"}]}]}',
            "'state' 'exploded' is not one Hearth knows",
        ),
    ],
)
def test_a_file_that_is_not_an_export_is_refused_with_a_sentence_and_adds_nothing(
    full_store, tmp_path, content, sentence
):
    before = dump(full_store)
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ExportError, match=sentence):
        import_file(full_store, path)
    assert dump(full_store) == before


def test_a_reply_exported_while_streaming_comes_in_interrupted(tmp_path):
    source = ChatStore(tmp_path / "a" / "chats.db")
    chat = source.create_chat("m")
    q = source.add_message(chat.id, None, "user", "hi")
    source.add_message(chat.id, q.id, "assistant", "half a rep", state=STREAMING)
    path = tmp_path / "x.json"
    path.write_text(json.dumps(chats_to_json(source)))  # the app still writing the reply
    target = ChatStore(tmp_path / "b" / "chats.db")
    (new,) = import_file(target, path)
    assert [(m.content, m.state) for m in target.path(new)] == [
        ("hi", "done"),
        ("half a rep", INTERRUPTED),
    ]


def test_markdown_shows_the_branch_on_screen(full_store):
    text = chats_to_markdown(full_store)
    sky = text[text.index("# Why is the sky blue?") :]
    assert "Rayleigh scattering: short wavelengths" in sky  # the branch on screen
    assert "Because of *Rayleigh*" not in sky and "French" not in sky  # the others are not
    assert "<summary>Thinking</summary>" in sky and "> You are terse." in sky
    weather = text[text.index("# Weather") : text.index("---")]
    assert "tools: weather, files" in weather
    assert "**Tool call:** `weather__forecast`" in weather and '"city": "Oslo"' in weather
    assert "## Tool result: forecast (weather)" in weather
    assert "(1 image attached)" in weather
    assert "Oslo: 3 and 5 degrees." in weather and "(version 2 of 2)" in weather
    # the reply cut off inside a code block: its fence is closed, the next chat is not code
    code = text[text.index("# Write `hello`") :]
    assert code.index('"""Say\n```') < code.index("(cut off")
    assert code.count("```") % 2 == 0


def _hearth(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HEARTH_HOME=str(home), PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "hearth", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def test_the_chats_commands(tmp_path):
    home = tmp_path / "home"
    _, record = copy_schema1(home)
    listed = _hearth("chats", "list", home=home)
    assert listed.returncode == 0, listed.stderr
    assert "Holiday photos" in listed.stdout and len(listed.stdout.splitlines()) == 4
    out = tmp_path / "chats.json"
    done = _hearth("chats", "export", "-o", str(out), home=home)
    assert done.returncode == 0 and "exported 4 chats" in done.stderr
    assert json.loads(out.read_text())["version"] == EXPORT_VERSION
    photos = next(
        c["chat"]["id"] for c in record["chats"] if c["chat"]["title"] == "Holiday photos"
    )
    one = _hearth("chats", "export", "--chat", str(photos), "--format", "markdown", home=home)
    assert one.returncode == 0 and one.stdout.startswith("# Holiday photos")
    md = tmp_path / "sky.md"
    assert _hearth("chats", "export", "--chat", "1", "-o", str(md), home=home).returncode == 0
    assert md.read_text().startswith("# Why is the sky blue?")

    other = tmp_path / "other-home"
    imported = _hearth("chats", "import", str(out), home=other)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"imported 4 chats from {out}")
    assert_same_chats(ChatStore(other / "chats.db"), record, same_ids=False)

    bad = _hearth("chats", "import", str(md), home=other)
    assert bad.returncode == 1
    assert bad.stderr.startswith(f"hearth: {md} is not a Hearth chat export")
    missing = _hearth("chats", "export", "--chat", "42", home=home)
    assert missing.returncode == 1 and "there is no chat 42" in missing.stderr
