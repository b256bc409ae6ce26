"""Compaction's Qt-free core: when a turn would not fit, what a summary covers, the prompt it
makes (pinned entries kept, undone summaries ignored), the batched summarisation request, and
the summary as stored, upgraded from schema 3 and carried by the export."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hearth.history import ChatStore, compaction, migrations
from hearth.history.compaction import SUMMARY, fold, plan, summarise, would_overflow
from hearth.history.export import chats_from_json, chats_to_json
from hearth.history.export_markdown import chats_to_markdown
from hearth.history.records import UNDONE


def _turns(n: int, size: int = 300) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"role": "user", "content": f"question {i} " + "q" * size})
        out.append({"role": "assistant", "content": f"answer {i} " + "a" * size})
    return out


def test_would_overflow_counts_used_question_and_room():
    assert not would_overflow(512, 100, "hi")
    assert would_overflow(512, 400, "hi")  # 400 + 1 + 128 > 512
    assert would_overflow(512, 0, "x" * 1200)  # the question alone is ~400 tokens
    assert would_overflow(4096, 10, "hi", cut=True)  # the service cut the last prompt


def test_fold_without_a_summary_is_the_conversation():
    entries = _turns(2) + [{"role": "assistant", "content": "", "drop": True}]
    assert fold(entries, "Be brief.") == [{"role": "system", "content": "Be brief."}] + _turns(2)


def test_plan_keeps_the_question_and_fold_puts_the_summary_in_the_system_prompt():
    entries = _turns(3) + [{"role": "user", "content": "last question"}]
    p = plan(entries, 512)
    assert p is not None and p.previous == ""
    # the kept part starts at a user message and holds the new question
    assert entries[p.covers]["role"] == "user" and p.covers <= len(entries) - 1
    assert [t["content"] for t in p.turns] == [e["content"] for e in entries[: p.covers]]
    entries.append({"role": SUMMARY, "content": "The user asked 3 questions.", "covers": p.covers})
    prompt = fold(entries, "Be brief.")
    assert prompt[0]["role"] == "system"
    assert prompt[0]["content"].startswith("Be brief.\n\n")
    assert prompt[0]["content"].endswith("The user asked 3 questions.")
    assert prompt[1:] == [{k: v for k, v in e.items()} for e in entries[p.covers : -1]]
    assert all(m["role"] != SUMMARY for m in prompt)


def test_pinned_entries_are_never_summarised_away():
    entries = _turns(3)
    entries[0] = {**entries[0], "pinned": True, "content": "see the attached report"}
    entries.append({"role": "user", "content": "and now?"})
    p = plan(entries, 512)
    assert p is not None and p.covers > 0
    assert all(t["content"] != "see the attached report" for t in p.turns)
    entries.append({"role": SUMMARY, "content": "S", "covers": p.covers})
    prompt = fold(entries)
    assert prompt[1] == {"role": "user", "content": "see the attached report"}


def test_undo_restores_the_original_turns():
    entries = _turns(3) + [{"role": "user", "content": "q"}]
    before = fold(entries, "sys")
    entries.append({"role": SUMMARY, "content": "S", "covers": 4, "undone": True})
    assert fold(entries, "sys") == before


def test_a_second_summary_folds_in_the_first():
    entries = _turns(2) + [{"role": "user", "content": "q2"}]
    entries.append({"role": SUMMARY, "content": "first summary", "covers": 4})
    entries += [{"role": "assistant", "content": "a2 " + "b" * 900}]
    entries += [{"role": "user", "content": "q3 " + "c" * 900}]
    entries += [{"role": "assistant", "content": "a3"}, {"role": "user", "content": "q4"}]
    p = plan(entries, 512)
    assert p is not None and p.previous == "first summary" and p.covers > 5
    # only what the first summary does not already stand for is summarised again
    assert [t["content"][:2] for t in p.turns][0] == "q2"


def test_summarise_batches_to_fit_and_bounds_the_answer():
    asked = []

    def ask(messages, num_predict):
        asked.append((messages, num_predict))
        return f"summary {len(asked)}"

    p = compaction.Plan(covers=40, previous="", turns=_turns(20, 200))
    out = summarise(p, 512, ask)
    assert len(asked) > 1 and out == f"summary {len(asked)}"
    for i, (messages, num_predict) in enumerate(asked):
        assert num_predict == compaction.summary_tokens(512) <= 512 // 6
        size = sum(compaction.estimate_tokens(m["content"]) for m in messages)
        assert size + num_predict <= 512
        assert messages[0]["content"] == compaction.INSTRUCTION
        if i:  # each later batch carries the summary so far
            assert f"Summary so far:\nsummary {i}" in messages[1]["content"]
    text = "\n".join(m[0][1]["content"] for m in asked)
    for i in range(20):  # every turn went into some batch, in order
        assert f"User: question {i} " in text and f"Assistant: answer {i} " in text


def _schema4_file(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for step in migrations.STEPS[:4]:
        conn.execute("BEGIN")
        step.apply(conn)
        conn.execute(f"PRAGMA user_version={step.version}")
        conn.execute("COMMIT")
    conn.execute(
        "INSERT INTO chats(id, model, created_at, updated_at, current_leaf)"
        " VALUES (1, 'm', 0, 0, 2)"
    )
    conn.execute(
        "INSERT INTO messages(id, chat_id, parent_id, role, content, created_at)"
        " VALUES (1, 1, NULL, 'user', 'hello', 0), (2, 1, 1, 'assistant', 'hi', 0)"
    )
    conn.close()


def test_a_schema4_file_upgrades_and_a_summary_is_stored_and_exported(tmp_path: Path):
    db = tmp_path / "chats.db"
    _schema4_file(db)
    store = ChatStore(db)
    assert migrations.SCHEMA_VERSION >= 5
    assert [(m.role, m.content, m.covers) for m in store.path(1)] == [
        ("user", "hello", 0),
        ("assistant", "hi", 0),
    ]
    q = store.add_message(1, 2, "user", "next")
    s = store.add_message(1, q.id, SUMMARY, "they greeted", covers=2)
    store.update_message(s.id, state=UNDONE)
    data = chats_to_json(store, [1])
    assert data["version"] == 3
    summary = data["chats"][0]["messages"][-1]
    assert summary["role"] == SUMMARY and summary["covers"] == 2 and summary["state"] == UNDONE
    assert "covers" not in data["chats"][0]["messages"][0]
    (record,) = chats_from_json(data, "file")
    (new_id,) = store.add_chats([record])
    back = store.path(new_id)
    assert [(m.role, m.content, m.covers, m.state) for m in back][-1] == (
        SUMMARY,
        "they greeted",
        2,
        UNDONE,
    )
    assert [m.content for m in back[:2]] == ["hello", "hi"]  # the originals too
    markdown = chats_to_markdown(store, [1])
    assert "Earlier messages were summarised to fit the context (undone" in markdown
    assert "Summary of 2 messages" in markdown and "they greeted" in markdown
    store.close()
