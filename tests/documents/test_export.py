"""A chat's documents travel with its export: importing it into an empty home gives the same
chats with the same documents (chunks, pages, modes, vectors) and the same sources, and the
imported chat builds its prompts and answers follow-up questions without reading any file."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from make_documents import FACT_PAGE, FACT_QUESTION, headed_docx

from hearth.documents import ChatDocuments, prepare, prepare_document, readers
from hearth.history import ChatStore
from hearth.history.export import ExportError, chats_to_json, import_file
from hearth.history.export_markdown import chats_to_markdown

from .toy_embedding import _toy_vector

HYBRID_QUESTION = "Port authority grant: beacon repair?"  # no word of the page: vectors find it


def _embed(question: str) -> tuple[list[float], str]:
    return _toy_vector(question), "toy"


@pytest.fixture(scope="module")
def with_vectors(long_pdf_path):
    prepared = prepare_document(long_pdf_path)
    return replace(
        prepared, vectors=[_toy_vector(c.text) for c in prepared.chunks], embed_model="toy"
    )


def _send(store, docs, chat, parent, text, prepared, num_ctx=2048):
    msg = store.add_message(chat.id, parent, "user", text)
    docs.on_sent(msg, prepared, "", store.path(chat.id)[:-1], num_ctx)
    return msg


def _write_chat(store: ChatStore, long: Any, docx: Any) -> int:
    """A question with a long PDF (searched, with vectors) and a DOCX, its reply, a follow-up
    that searches the PDF again (its sources are in the first question's documents), and an
    edited first question that keeps its documents (a second branch)."""
    docs = ChatDocuments(store, embed=_embed)
    chat = store.create_chat("tiny", title="Report")
    q1 = _send(store, docs, chat, None, FACT_QUESTION, [long, docx])
    a1 = store.add_message(chat.id, q1.id, "assistant", "4,812,000 kroner [1].", model="tiny")
    q2 = _send(store, docs, chat, a1.id, "When must the Skagen lighthouse be finished?", [], 8192)
    store.add_message(chat.id, q2.id, "assistant", "Before the autumn storms [1].", model="tiny")
    edited = store.add_message(chat.id, None, "user", HYBRID_QUESTION)
    docs.copy(q1, edited)
    docs.on_sent(edited, [], "", [], 2048)
    store.add_message(chat.id, edited.id, "assistant", "Yes.", model="tiny")
    return chat.id


def _snapshot(store: ChatStore) -> list[dict[str, Any]]:
    """Everything a reopened chat shows and sends, ids left out (an import makes new ones):
    messages in tree order with their parents' places, each question's documents with their
    passages and vectors, its sources and the text its prompt carries."""
    docs = ChatDocuments(store)
    conn = store.connection
    out = []
    for chat in store.chats():
        tree = store.tree(chat.id)
        place = {m.id: i for i, m in enumerate(tree)}
        messages = []
        for m in tree:
            record = dataclasses.asdict(m)
            for key in ("id", "chat_id", "parent_id"):
                record.pop(key)
            record["parent"] = None if m.parent_id is None else place[m.parent_id]
            attached = []
            for d in docs.attached(m.id):
                passages = [
                    (section, text, [(r[0], bytes(r[1])) for r in conn.execute(
                        "SELECT model, vector FROM chunk_vectors WHERE chunk_id=? ORDER BY model",
                        (cid,),
                    )])
                    for cid, section, text, _origin in docs.index.chunks(d.id)
                ]  # fmt: skip
                fields = dataclasses.asdict(d)
                fields.pop("id"), fields.pop("message_id")
                attached.append({**fields, "passages": passages})
            record["documents"] = attached
            record["sources"] = [
                replace(c, chunk_id=0) for c in docs.citations(m.id)
            ]  # chunk ids are new
            record["sent"] = docs.message_text(m)
            messages.append(record)
        fields = dataclasses.asdict(chat)
        fields.pop("id")
        fields["current_leaf"] = place.get(chat.current_leaf) if chat.current_leaf else None
        out.append({"chat": fields, "messages": messages})
    return out


def _no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a file was read again")

    monkeypatch.setattr(readers, "read_document", fail)
    monkeypatch.setattr(prepare, "read_document", fail)


def test_documents_and_sources_come_back_from_an_export(tmp_path: Path, with_vectors, monkeypatch):
    source = ChatStore(tmp_path / "source" / "chats.db")
    docx = prepare_document(headed_docx(tmp_path / "trial.docx"))
    _write_chat(source, with_vectors, docx)
    source.create_chat("tiny", title="Plain")  # a chat without documents comes along
    before = _snapshot(source)
    report = before[1] if before[0]["chat"]["title"] == "Plain" else before[0]
    q1 = report["messages"][0]
    assert [d["mode"] for d in q1["documents"]] == ["searched", "whole"]
    assert all(p[2] == [("toy", p[2][0][1])] for p in q1["documents"][0]["passages"])
    assert q1["sources"][0].number == 1 and q1["sources"][0].section == f"page {FACT_PAGE}"
    follow = report["messages"][2]
    assert follow["documents"] == [] and follow["sources"]  # cites the first question's PDF
    path = tmp_path / "export.json"
    path.write_text(json.dumps(chats_to_json(source)))
    source.close()

    _no_reading(monkeypatch)
    home = ChatStore(tmp_path / "empty" / "chats.db")
    assert len(import_file(home, path)) == 2
    assert _snapshot(home) == before

    # the imported chat goes on: a new question searches the imported passages, by their words
    # (the full-text index) and by the imported vectors (a question sharing no word with them)
    docs = ChatDocuments(home, embed=_embed)
    chat = next(c for c in home.chats() if c.title == "Report")
    leaf = home.path(chat.id)[-1]
    ask = home.add_message(chat.id, leaf.id, "user", HYBRID_QUESTION)
    ctx = docs.on_sent(ask, [], "", home.path(chat.id)[:-1], 8192)
    assert ctx.citations[0].section == f"page {FACT_PAGE}"
    assert "4,812,000" in ctx.citations[0].text
    words = docs.index.search([d.id for d in docs.attached(home.tree(chat.id)[0].id)], "lighthouse")
    assert words and words[0].section == f"page {FACT_PAGE}"
    home.close()


def test_markdown_names_the_documents_and_the_sources(tmp_path: Path, with_vectors):
    store = ChatStore(tmp_path / "chats.db")
    docx = prepare_document(headed_docx(tmp_path / "trial.docx"))
    chat_id = _write_chat(store, with_vectors, docx)
    first = store.tree(chat_id)[0]
    store.select(chat_id, first.id)  # the branch with the first question on screen
    text = chats_to_markdown(store, [chat_id])
    question, rest = text.split("## tiny", 1)
    assert "**Attached:**" in question
    assert "- annual-report.pdf (120 pages, sent searched)" in question
    assert "- trial.docx (4 sections, sent whole)" in question
    reply = rest.split("## You", 1)[0]
    assert "**Sources:**" in reply
    assert f"- [1] annual-report.pdf, page {FACT_PAGE}" in reply
    store.close()


def test_a_broken_source_or_vector_is_refused_and_adds_nothing(tmp_path: Path):
    store = ChatStore(tmp_path / "source" / "chats.db")
    docs = ChatDocuments(store)
    docx = prepare_document(headed_docx(tmp_path / "trial.docx"))
    chat = store.create_chat("tiny", title="Trial")
    _send(store, docs, chat, None, "What was the yield?", [docx], 4096)
    store.create_chat("tiny", title="Other")
    data = chats_to_json(store)
    store.close()
    trial = next(c for c in data["chats"] if c["title"] == "Trial")
    question = trial["messages"][0]
    assert question["sources"] and question["documents"]
    home = ChatStore(tmp_path / "home" / "chats.db")
    home.create_chat("tiny", title="Mine")

    def refused(change, sentence):
        broken = json.loads(json.dumps(data))
        change(next(c for c in broken["chats"] if c["title"] == "Trial")["messages"][0])
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(ExportError, match=sentence):
            import_file(home, path)
        assert [c.title for c in home.chats()] == ["Mine"]
        assert home.connection.execute("SELECT COUNT(*) FROM documents").fetchone()[0] == 0

    refused(
        lambda q: q["sources"][0].update(chunk=99),
        r"message 1 cites passage 99 of document 0 of message 1, which is not there",
    )
    refused(
        lambda q: q["documents"][0]["chunks"][0].update(vectors={"toy": "AAA="}),
        r"document 1, passage 1: the vector of 'toy' is not float32 numbers in base64",
    )
    refused(lambda q: q["documents"][0].update(mode="half"), r"'mode' 'half' is neither")
    home.close()
