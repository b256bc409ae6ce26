"""Compaction in the desktop app against a real `hearth serve` and the default model, with a
512-token context: a chat that outgrows it gets a summary (made by the chat's own model off the
GUI thread), shown as a notice whose summary expands; the summary is stored as its own kind of
message beside the originals and exported with them; the reply after it fits (its whole
prompt under num_ctx, the final record saying nothing was truncated or shifted); Undo puts the
original turns back into the prompt."""

from __future__ import annotations

import json

import pytest

from hearth.history.compaction import NOTICE, SUMMARY
from hearth.history.records import DONE, UNDONE
from hearth.ui.controllers.request import chat_body
from hearth.ui.widgets.summary_notice import SummaryNotice

from support.ui import send_and_wait

pytestmark = pytest.mark.slow

NUM_CTX = 512
OPTIONS = {"num_ctx": NUM_CTX, "num_predict": 40, "temperature": 0.0, "seed": 1}
SYSTEM = "You are a helpful assistant. Answer briefly."
FACTS = [
    "My name is Ada Lovelace and I live in the town of Ockham, where I keep three goats.",
    "We decided that the garden shed will be painted green before the end of May.",
    "My brother Charles Babbage repairs clocks; his workshop is on Marchmont Street.",
    "Open question: should the goats move to the north field this winter or stay put?",
    "What is my name?",
]
FILLER = (
    " I am telling you this so that you remember it later in our conversation, because I will"
    " come back to it and ask you about it; for now please reply in one short sentence only,"
    " there is no need to explain anything or to ask me anything."
)


def test_a_chat_that_outgrows_its_context_is_compacted_visibly_and_reversibly(
    qtbot, make_app, real_service, tmp_path
):
    app = make_app(real_service["url"], real_service["token"])
    chat = app.chat
    chat.update_chat_settings(SYSTEM, dict(OPTIONS))
    assert chat.num_ctx() == NUM_CTX
    for fact in FACTS:
        send_and_wait(qtbot, app, fact + FILLER, timeout=300_000)
        if any(i.role == SUMMARY for i in chat.conversation.items()):
            break
    items = chat.conversation.items()
    roles = [i.role for i in items]
    assert SUMMARY in roles, roles
    at = roles.index(SUMMARY)
    summary, reply = items[at], items[at + 1]
    assert roles[at - 1] == "user" and reply.role == "assistant" and reply.state == DONE
    assert summary.content.strip() and summary.covers >= 2
    # the request after compaction fits: the service evaluated all of it, cut nothing
    assert reply.stats["prompt_tokens"] < NUM_CTX
    assert reply.stats["truncated"] is False and reply.stats["shifted"] is False
    # the notice, with the summary behind a toggle
    notice = app.window.chat_page.transcript.widget_for(summary.id)
    assert isinstance(notice, SummaryNotice)
    assert notice.title.text() == NOTICE
    assert notice.body.isHidden()
    notice.toggle.click()
    assert notice.body.isVisibleTo(notice) and notice.body.text() == summary.content
    # stored as its own kind of message, the originals kept before it
    path = app.store.path(chat.chat.id)
    assert [m.role for m in path] == roles
    stored = path[at]
    assert (stored.role, stored.covers, stored.state) == (SUMMARY, summary.covers, DONE)
    originals = [m.content for m in path[: summary.covers]]
    assert originals[0].startswith(FACTS[0])
    # the prompt of that reply: the system prompt with the summary, without the originals
    body = chat_body(chat.chat, path[: at + 1], {}, None)
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"].startswith(SYSTEM)
    assert summary.content.strip() in body["messages"][0]["content"]
    assert not any(m["content"] == originals[0] for m in body["messages"])
    # exported: the summary and the messages it covers
    out = tmp_path / "chats.json"
    app.history.export_to(out, "json", [chat.chat.id])
    exported = json.loads(out.read_text())["chats"][0]["messages"]
    assert [m["role"] for m in exported] == roles
    assert exported[at]["covers"] == summary.covers and exported[at]["content"] == summary.content
    assert exported[0]["content"] == originals[0]
    # Undo: the original turns go to the model again
    notice.undo.click()
    assert app.store.message(summary.id).state == UNDONE
    qtbot.waitUntil(lambda: "undone" in notice.title.text().lower(), timeout=5_000)
    assert notice.undo.text() == "Use summary"
    body = chat_body(chat.chat, app.store.path(chat.chat.id)[: at + 1], {}, None)
    sent = [m["content"] for m in body["messages"][1:]]
    assert sent[: summary.covers] == originals
    assert body["messages"][0]["content"] == SYSTEM
    # ... and back
    notice.undo.click()
    assert app.store.message(summary.id).state == DONE
