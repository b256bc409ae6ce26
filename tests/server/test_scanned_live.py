"""Scanned PDF pages through a real vision model on a live `hearth serve`: a tiny random Gemma 3
with its llama.cpp projector (`build_tiny_gemma3_vision`) reads the image of a page that has no
text layer (a picture of printed text, written by the test), beside a text-only tiny llama.

The random model's words are gibberish, but greedy and deterministic: what is stored as the
page's text must be exactly what the service's own /api/chat answers for that page's image and
the transcription prompt (the request written out here by hand, the page rendered by PDFium
independently of the code under test's call). It is stored with the chat, cited "read from an
image of page 2" (Python API, reopened store, and `hearth run --attach`), and a service
without a vision model leaves the note that names the remedy.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from documents.make_documents import scanned_text_pdf, text_picture

from hearth.documents import ChatDocuments, prepare_document
from hearth.documents.records import FROM_IMAGE
from hearth.documents.scanned import SUGGESTED_VISION_MODEL, TRANSCRIBE_PROMPT, Transcriber
from hearth.history import ChatStore
from hearth.plugins.testing import ConverterUnavailableError

from .fakes import LiveServer, start_server, stop_server
from support.cli import hearth

pytestmark = pytest.mark.slow

VISION, TEXT = "tiny-vision", "tiny-text"
TOKENS = 128  # its first word characters come after about 40 tokens; its context is 512


def _create(server: LiveServer, body: dict) -> None:
    made = httpx.post(server.url + "/api/create", json={**body, "stream": False}, timeout=300)
    assert made.status_code == 200 and made.json()["status"] == "success", made.text


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama_path: Path
) -> Iterator[LiveServer]:
    home = tmp_path_factory.mktemp("scan-home")
    live = start_server(home, None, {"HEARTH_CONTEXT_LENGTH": "512", "HEARTH_OFFLINE": "1"})
    try:
        _create(live, {"model": TEXT, "from": str(tiny_llama_path)})
        yield live
    finally:
        stop_server(live)


@pytest.fixture(scope="module")
def vision(service: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    from hearth_gemma3.testing import build_tiny_gemma3_vision

    try:
        files = build_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3-vision"))
    except ConverterUnavailableError as e:
        pytest.skip(str(e))
    _create(service, {"model": VISION, "from": str(files.text), "projector": str(files.mmproj)})
    return f"{VISION}:latest"


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    picture = text_picture(["INVOICE 4471", "Total due: 312 euros"])
    return scanned_text_pdf(tmp_path_factory.mktemp("scan") / "supplier.pdf", [picture])


def _rendered_page_two(pdf: Path) -> bytes:
    """Page 2 rendered by PDFium here, as the reader is documented to: 150 dpi, the longer side
    at most 1,600 pixels, PNG."""
    import io

    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(pdf))
    page = doc[1]
    scale = min(150 / 72, 1600 / max(page.get_size()))
    out = io.BytesIO()
    page.render(scale=scale).to_pil().convert("RGB").save(out, "PNG")
    doc.close()
    return out.getvalue()


def _direct(server: LiveServer, model: str, png: bytes) -> str:
    """The service's own answer for the page image and the transcription prompt."""
    body = {
        "model": model,
        "messages": [
            {
                "role": "user",
                "content": TRANSCRIBE_PROMPT,
                "images": [base64.b64encode(png).decode()],
            }
        ],
        "stream": False,
        "options": {"temperature": 0, "num_predict": TOKENS},
    }
    reply = httpx.post(server.url + "/api/chat", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["message"]["content"]).strip()


def test_a_scanned_page_is_read_by_the_vision_model_stored_and_cited(
    service, vision, scan, tmp_path, monkeypatch
):
    seen: list[tuple[int, int, int]] = []
    # the chat's model cannot see: the installed vision model reads the page
    reader = Transcriber(service.url, prefer=TEXT, num_predict=TOKENS,
                         progress=lambda *a: seen.append(a))  # fmt: skip
    prepared = prepare_document(scan, transcriber=reader)
    assert reader.vision_model() == vision and seen == [(2, 0, 1)]
    page = prepared.document.sections[1]
    expected = _direct(service, VISION, _rendered_page_two(scan))
    assert expected  # the random model wrote something for this picture
    assert (page.label, page.text, page.origin) == ("page 2", expected, FROM_IMAGE)
    assert f"read from an image of the page by {vision}" in prepared.document.notes[0]
    # the chat's own model is used when it can see; a page's transcription is capped at half
    # the model's context (HEARTH_CONTEXT_LENGTH=512 here)
    own = Transcriber(service.url, prefer=vision)
    assert own.vision_model() == vision and own.num_predict == 256

    db = tmp_path / "chats.db"
    store = ChatStore(db)
    chat = store.create_chat(TEXT)
    # a question in the transcription's words (the random model writes few), so the full-text
    # search picks its passage to cite
    words = re.findall(r"\w+", expected)
    assert words, repr(expected)
    question = store.add_message(chat.id, None, "user", " ".join(words))
    context = ChatDocuments(store).on_sent(question, [prepared], "", [], 4096)
    assert f"[read from an image of page 2]\n{expected}" in context.text, repr(expected)
    assert "supplier.pdf, read from an image of page 2" in [c.label() for c in context.citations]
    store.close()

    # reopened (the file gone): the transcription is read from the database, no page is
    # rendered and no model asked
    def refuse(*_a, **_k):
        raise AssertionError("a reopened chat read its document again")

    monkeypatch.setattr("hearth.documents.scanned.render_page", refuse)
    monkeypatch.setattr("hearth.documents.scanned.post_json", refuse)
    scan_copy = scan.read_bytes()
    scan.unlink()
    try:
        store = ChatStore(db)
        docs = ChatDocuments(store)
        assert expected in docs.message_text(store.message(question.id))
        assert any(c.where() == "read from an image of page 2" for c in docs.citations(question.id))
        store.close()
    finally:
        scan.write_bytes(scan_copy)


def test_hearth_run_attach_reads_the_scanned_page_and_cites_its_image(service, vision, scan):
    # greedy: the longer transcription `hearth run` asks for begins with the shorter one
    words = re.findall(r"\w+", _direct(service, VISION, _rendered_page_two(scan)))
    out = hearth("run", TEXT, " ".join(words), "--attach", str(scan), "--num-predict", "4",
                 "--temperature", "0", server=service)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"(reading supplier.pdf: page 2 from its image with {vision}, 1 of 1)" in out.stderr
    assert f"read from an image of the page by {vision}" in out.stderr
    assert "[supplier.pdf: 2 pages, " in out.stderr
    assert "supplier.pdf, read from an image of page 2" in out.stderr.split("Sources: ")[-1]


def test_without_a_vision_model_the_note_names_the_remedy(tmp_path, tiny_llama_path, scan):
    home = tmp_path / "bare-home"
    live = start_server(home, None, {"HEARTH_CONTEXT_LENGTH": "512", "HEARTH_OFFLINE": "1"})
    try:
        _create(live, {"model": TEXT, "from": str(tiny_llama_path)})
        out = hearth("run", TEXT, "What is due?", "--attach", str(scan), "--num-predict", "4",
                     server=live)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "page 2 is an image without a text layer (scanned?)" in out.stderr
        assert f"install one, such as {SUGGESTED_VISION_MODEL}" in out.stderr
        assert "from its image" not in out.stderr
        only = scanned_text_pdf(tmp_path / "only.pdf", [text_picture(["RECEIPT"])], False)
        out = hearth("run", TEXT, "What is it?", "--attach", str(only), server=live)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert "only.pdf has no text Hearth can read: page 1 is an image" in out.stderr
        assert "vision model" in out.stderr
    finally:
        stop_server(live)
