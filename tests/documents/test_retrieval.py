"""Fitting documents into the context: whole when they fit, else the passages that answer the
question (BM25; fused with embeddings when there are vectors), stored with the chat so the
prompt can be rebuilt without the file, and citations that name the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from make_documents import FACT, FACT_PAGE, FACT_QUESTION, headed_docx

from hearth.documents import ChatDocuments, prepare_document
from hearth.documents.context import choose_modes, document_budget, estimate_tokens
from hearth.history import ChatStore

from .toy_embedding import _toy_vector


@pytest.fixture
def store(tmp_path: Path):
    s = ChatStore(tmp_path / "chats.db")
    yield s
    s.close()


@pytest.fixture(scope="module")
def long_prepared(long_pdf_path):
    return prepare_document(long_pdf_path)


def _ask(store, docs, question, prepared, num_ctx, parent=None, chat=None):
    chat = chat or store.create_chat("tiny")
    msg = store.add_message(chat.id, parent, "user", question)
    earlier = store.path(chat.id)[:-1]
    return chat, msg, docs.on_sent(msg, prepared, "", earlier, num_ctx)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_decision_is_made_against_num_ctx():
    assert document_budget(4096, 100) == 4096 - 1024 - 100
    assert document_budget(1024, 0) == 1024 - 256
    assert choose_modes([500, 700], 2000) == ["whole", "whole"]
    # too much together: the small one whole (it fits in half), the large one searched
    assert choose_modes([500, 90_000], 2000) == ["whole", "searched"]
    assert choose_modes([90_000], 2000) == ["searched"]


def test_a_document_that_fits_goes_in_whole(store, tmp_path):
    docs = ChatDocuments(store)
    prepared = prepare_document(headed_docx(tmp_path / "trial.docx"))
    assert docs.preview_modes([prepared], "", [], 4096) == ["whole"]
    _chat, msg, ctx = _ask(store, docs, "What was the yield?", [prepared], 4096)
    (stored,) = docs.attached(msg.id)
    assert stored.mode == "whole" and stored.name == "trial.docx" and stored.sections == 4
    assert '<document name="trial.docx" sections="4" sent="whole">' in ctx.text
    for section in prepared.document.sections:
        assert f"[{section.label}]" in ctx.text and section.text in ctx.text
    assert ctx.citations[0].section == "Results"  # the passage that answers is cited
    assert ctx.citations[0].number == 0  # a whole document's passages are not numbered
    assert docs.message_text(msg) == ctx.text + "\n\nWhat was the yield?"


def test_a_fact_deep_in_a_document_far_larger_than_the_context_is_found(store, long_prepared):
    docs = ChatDocuments(store)
    num_ctx = 2048
    assert estimate_tokens(long_prepared.document.text_for_estimate()) > 40 * num_ctx
    assert docs.preview_modes([long_prepared], "", [], num_ctx) == ["searched"]
    _chat, msg, ctx = _ask(store, docs, FACT_QUESTION, [long_prepared], num_ctx)
    assert docs.attached(msg.id)[0].mode == "searched"
    first = ctx.citations[0]
    assert first.number == 1 and first.section == f"page {FACT_PAGE}"
    assert first.document == "annual-report.pdf"
    assert "4,812,000 kroner" in first.text
    assert f"[1] annual-report.pdf, page {FACT_PAGE}:" in ctx.text
    assert _flat(FACT) in _flat(ctx.text)
    sent = docs.message_text(msg)
    assert estimate_tokens(sent) < num_ctx - 256  # the prompt fits, with room for the reply
    # the prompt says which chunks were used
    assert re.search(r"these are the \d+ passages that best match the question", ctx.text)


def test_a_reopened_chat_rebuilds_the_prompt_without_the_file(
    tmp_path, long_pdf_path, long_prepared, monkeypatch
):
    path = tmp_path / "chats.db"
    store = ChatStore(path)
    docs = ChatDocuments(store)
    _chat, msg, ctx = _ask(store, docs, FACT_QUESTION, [long_prepared], 2048)
    store.close()

    from hearth.documents import readers

    def no_reading(*_a, **_k):
        raise AssertionError("a file was read again")

    monkeypatch.setattr(readers, "read_document", no_reading)
    again = ChatStore(path)
    docs = ChatDocuments(again)
    reopened = again.message(msg.id)
    assert reopened is not None
    assert docs.message_text(reopened) == ctx.text + "\n\n" + FACT_QUESTION
    assert docs.citations(msg.id) == ctx.citations
    again.close()


def test_a_follow_up_question_searches_the_document_again(store, long_prepared):
    docs = ChatDocuments(store)
    chat, first, _ = _ask(store, docs, "What colour is the sky?", [long_prepared], 2048)
    reply = store.add_message(chat.id, first.id, "assistant", "I cannot tell.")
    _chat, follow, ctx = _ask(store, docs, FACT_QUESTION, [], 2048, reply.id, chat)
    assert docs.attached(follow.id) == []
    assert ctx.citations[0].section == f"page {FACT_PAGE}"
    assert "4,812,000 kroner" in docs.message_text(follow)


def test_an_edited_question_keeps_its_documents(store, tmp_path):
    docs = ChatDocuments(store)
    prepared = prepare_document(headed_docx(tmp_path / "trial.docx"))
    chat, msg, _ = _ask(store, docs, "What was the yield?", [prepared], 4096)
    edited = store.add_message(chat.id, None, "user", "How much water per week?")
    docs.copy(msg, edited)
    ctx = docs.on_sent(edited, [], "", [], 4096)
    assert [d.name for d in docs.attached(edited.id)] == ["trial.docx"]
    assert docs.citations(edited.id)[0].section == "Method › Irrigation"
    assert "18 millimetres" in ctx.text or "18 millimetres" in docs.message_text(edited)


def test_embeddings_find_what_the_words_alone_miss(store, long_prepared):
    """A question in other words than the document's: BM25 finds nothing; with vectors from
    an embedding model the hybrid ranking finds the page."""
    question = "Port authority grant: beacon repair?"
    plain = ChatDocuments(store)
    _c, msg, ctx = _ask(store, plain, question, [long_prepared], 2048)
    assert not any("4,812,000" in c.text for c in ctx.citations)

    from dataclasses import replace

    with_vectors = replace(
        long_prepared,
        vectors=[_toy_vector(c.text) for c in long_prepared.chunks],
        embed_model="toy",
    )
    hybrid = ChatDocuments(store, embed=lambda q: (_toy_vector(q), "toy"))
    _c, msg, ctx = _ask(store, hybrid, question, [with_vectors], 2048)
    assert ctx.citations[0].section == f"page {FACT_PAGE}"
    assert "4,812,000" in ctx.citations[0].text


def test_deleting_the_chat_deletes_its_documents_and_their_index(store, tmp_path):
    docs = ChatDocuments(store)
    prepared = prepare_document(headed_docx(tmp_path / "trial.docx"))
    chat, msg, _ = _ask(store, docs, "What was the yield?", [prepared], 4096)
    doc_id = docs.attached(msg.id)[0].id
    assert docs.index.search([doc_id], "yield")
    store.delete_chat(chat.id)
    conn = store.connection
    for table in ("documents", "document_chunks", "chunk_vectors", "message_sources"):
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
    assert (
        conn.execute(
            "SELECT COUNT(*) FROM document_chunks_fts WHERE document_chunks_fts MATCH 'yield'"
        ).fetchone()[0]
        == 0
    )
