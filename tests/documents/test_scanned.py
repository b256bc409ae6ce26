"""Scanned PDF pages (no text layer): rendered with PDFium (checked against the picture the
test put on the page), read by a vision model once (here a scripted stand-in that answers a
known text; tests/server/test_scanned_live.py runs the real tiny vision model), stored with the
chat as the page's text marked with its origin, cited "read from an image of page N" in the
prompt, the sources, both exports, and after a reopen without the file; without a vision model
the note names the remedy."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from make_documents import scanned_text_pdf, text_picture
from PIL import Image

from hearth.documents import ChatDocuments, DocumentError, prepare_document, read_document
from hearth.documents import scanned as scanned_module
from hearth.documents.records import FROM_IMAGE
from hearth.documents.scanned import (
    MAX_RENDER_SIDE,
    SUGGESTED_VISION_MODEL,
    TranscriptionError,
    render_page,
)
from hearth.history import ChatStore
from hearth.history.export import chats_from_json, chats_to_json
from hearth.history.export_markdown import chats_to_markdown

INVOICE = ["INVOICE 4471", "Total due: 312 euros"]
SAID = "INVOICE 4471\nTotal due: 312 euros, payable to Lindqvist Timber."


class Scripted:
    """A vision model stand-in: answers `said` for every page image and keeps the images."""

    def __init__(self, said: str = SAID, model: str = "seer:latest", fail: str = "") -> None:
        self.said, self.model, self.fail = said, model, fail
        self.images: list[bytes] = []
        self.pages: list[tuple[int, int, int]] = []
        self.progress = lambda page, done, total: self.pages.append((page, done, total))

    def vision_model(self) -> str:
        return self.model

    def transcribe(self, png: bytes) -> str:
        self.images.append(png)
        if self.fail:
            raise TranscriptionError(self.fail)
        return self.said


@pytest.fixture
def invoice_pdf(tmp_path: Path) -> Path:
    return scanned_text_pdf(tmp_path / "supplier.pdf", [text_picture(INVOICE)])


def test_a_scanned_page_renders_as_the_picture_on_it_within_the_size_bound(invoice_pdf):
    picture = text_picture(INVOICE)
    page = Image.open(io.BytesIO(render_page(invoice_pdf, 2))).convert("L")
    # A4 (210 x 297 mm) at 150 dpi is 1240 x 1754 px: the longer side is capped
    # (PDFium rounds a fractional pixel up or down)
    assert page.size[1] == MAX_RENDER_SIDE
    assert abs(page.size[0] - MAX_RENDER_SIDE * 595.28 / 841.89) <= 1
    px_per_mm = page.size[1] / 297
    # the picture was placed 190 mm wide at (10 mm, 10 mm), its height by its aspect ratio
    src = Image.open(io.BytesIO(picture)).convert("L")
    box = [round(v * px_per_mm) for v in (10, 10, 200, 10 + 190 * src.height / src.width)]
    placed = np.asarray(page.crop(box), np.float32)
    expected = np.asarray(src.resize(page.crop(box).size, Image.Resampling.BILINEAR), np.float32)
    assert np.abs(placed - expected).mean() < 6  # the same picture, up to resampling
    assert expected.std() > 20  # and not a blank one
    # the rest of the page is white paper
    below = np.asarray(page.crop((0, box[3] + 10, page.size[0], page.size[1])), np.float32)
    assert below.min() > 240
    small = Image.open(io.BytesIO(render_page(invoice_pdf, 2, dpi=36)))
    assert all(
        abs(got - 36 * pt / 72) <= 1 for got, pt in zip(small.size, (595.28, 841.89), strict=True)
    )
    with pytest.raises(ValueError, match="no page 3"):
        render_page(invoice_pdf, 3)


def test_a_scanned_page_is_read_once_stored_and_cited_from_its_image(
    invoice_pdf, tmp_path, monkeypatch
):
    model = Scripted()
    prepared = prepare_document(invoice_pdf, transcriber=model)
    assert len(model.images) == 1 and model.images[0] == render_page(invoice_pdf, 2)
    assert model.pages == [(2, 0, 1)]
    doc = prepared.document
    assert doc.scanned == [2]
    assert doc.sections[1].text == SAID and doc.sections[1].origin == FROM_IMAGE
    assert doc.sections[0].origin == ""  # the text layer's page
    assert (
        "page 2 had no text layer and was read from an image of the page by seer:latest"
        in (doc.notes[0])
    )
    assert {c.origin for c in prepared.chunks if c.section == "page 2"} == {FROM_IMAGE}

    db = tmp_path / "chats.db"
    store = ChatStore(db)
    docs = ChatDocuments(store)
    chat = store.create_chat("m")
    question = store.add_message(chat.id, None, "user", "What is the total of invoice 4471?")
    context = docs.on_sent(question, [prepared], "", [], 4096)
    cited = [c for c in context.citations if c.section == "page 2"]
    assert cited and cited[0].label() == "supplier.pdf, read from an image of page 2"
    assert "[read from an image of page 2]\n" + SAID in context.text
    assert "[page 1]\nPage 1 of the supplier file" in context.text
    reply = store.add_message(chat.id, question.id, "assistant", "312 euros.")
    markdown = chats_to_markdown(store)
    assert "- supplier.pdf, read from an image of page 2" in markdown
    exported = chats_to_json(store)
    chunks = exported["chats"][0]["messages"][0]["documents"][0]["chunks"]
    assert [c.get("origin", "") for c in chunks] == ["", "image"]
    store.close()

    # reopened: no file is read, no page rendered, no model asked
    def refuse(*_a, **_k):
        raise AssertionError("a reopened chat read its document again")

    invoice_pdf.unlink()
    store = ChatStore(db)
    for name in ("render_page", "read_scanned_pages"):
        monkeypatch.setattr(scanned_module, name, refuse)
    monkeypatch.setattr("hearth.documents.pdf.read_pdf", refuse)
    docs = ChatDocuments(store)
    question = store.message(question.id)
    assert docs.message_text(question) == context.text + "\n\n" + question.content
    assert [c.label() for c in docs.citations(question.id)] == [
        c.label() for c in context.citations
    ]
    # an edited question keeps the transcription and its origin
    edited = store.add_message(chat.id, None, "user", "And who is paid?")
    docs.copy(question, edited)
    assert [(s, o) for _i, s, _t, o in docs.index.chunks(docs.attached(edited.id)[0].id)] == [
        ("page 1", ""),
        ("page 2", FROM_IMAGE),
    ]
    # an imported export keeps the origin
    (record,) = chats_from_json(json.loads(json.dumps(exported)), "export.json")
    (new_id,) = store.add_chats([record])
    first = store.path(new_id)[0]
    assert [c.label() for c in docs.citations(first.id)] == [c.label() for c in context.citations]
    assert reply.parent_id == question.id
    store.close()


def test_without_a_vision_model_the_note_names_the_remedy(invoice_pdf, tmp_path):
    for transcriber in (None, Scripted(model="")):
        doc = read_document(invoice_pdf, transcriber=transcriber)
        assert doc.sections[1].text == "" and doc.sections[1].origin == ""
        (note,) = doc.notes
        assert note.startswith("page 2 is an image without a text layer (scanned?)")
        assert "vision model" in note and SUGGESTED_VISION_MODEL in note
    assert transcriber is not None and transcriber.images == []  # nothing was sent
    # a PDF of scanned pages only has nothing to read without one: a sentence with the remedy
    only = scanned_text_pdf(tmp_path / "scan.pdf", [text_picture(INVOICE)] * 2, False)
    with pytest.raises(DocumentError, match="has no text Hearth can read: pages 1–2 are images"):
        read_document(only)
    doc = read_document(only, transcriber=Scripted())
    assert [s.origin for s in doc.sections] == [FROM_IMAGE, FROM_IMAGE]


def test_the_catalog_offers_the_vision_model_the_note_suggests():
    from hearth.ui.catalog import CATALOG

    assert any(
        e.kind == "vision"
        and e.name in SUGGESTED_VISION_MODEL
        and e.title in SUGGESTED_VISION_MODEL
        for e in CATALOG
    )


def test_a_failing_model_or_too_many_pages_leave_the_rest_named(tmp_path, monkeypatch):
    pdf = scanned_text_pdf(tmp_path / "three.pdf", [text_picture(INVOICE)] * 3)
    failing = Scripted(fail="/api/chat: HTTP 500 out of memory")
    doc = read_document(pdf, transcriber=failing)
    assert len(failing.images) == 1  # it stops at the first failure
    assert all(s.origin == "" for s in doc.sections)
    assert doc.notes == [
        "page(s) 2–4 are images without a text layer that were not read (page 2: /api/chat: "
        "HTTP 500 out of memory)"
    ]
    doc = read_document(pdf, transcriber=Scripted(said=""))
    assert doc.notes == ["seer:latest found no text in the image of page(s) 2–4"]
    monkeypatch.setattr(scanned_module, "MAX_TRANSCRIBED_PAGES", 2)
    model = Scripted()
    doc = read_document(pdf, transcriber=model)
    assert [s.origin for s in doc.sections] == ["", FROM_IMAGE, FROM_IMAGE, ""]
    assert model.pages == [(2, 0, 2), (3, 1, 2)]
    assert "pages 2–3 had no text layer and were read" in doc.notes[0]
    assert "page(s) 4 are images without a text layer that were not read" in doc.notes[1]
    assert "at most 2 scanned pages" in doc.notes[1]
