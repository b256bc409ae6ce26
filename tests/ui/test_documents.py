"""Documents in the app (on the stub service): drop a PDF far larger than the context, see it
read with a progress line and a "searched" chip, ask, and the reply's sources name the page
and show the passage; the request is the Ollama API's own shape. A reopened chat shows its
chips and sources and regenerates the same prompt without reading the file again."""

from __future__ import annotations

import pytest
from documents.make_documents import FACT, FACT_QUESTION, long_pdf

from support.ui import drop_file, send_and_wait

PAGES, FACT_PAGE = 60, 47


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return long_pdf(tmp_path_factory.mktemp("ui-docs") / "annual-report.pdf", PAGES, FACT_PAGE)


def _last_question(stub) -> dict:
    chats = [r for r in stub.requests if r["path"] == "/api/chat"]
    return chats[-1]["messages"][-1]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_drop_a_pdf_ask_and_the_reply_cites_the_page(qtbot, stub, make_app, report, monkeypatch):
    stub.reply = "The commission approved 4,812,000 kroner [1]."
    app = make_app(stub.url)
    composer = app.window.chat_page.composer
    progress: list[str] = []
    app.chat.attachments_changed.connect(lambda: progress.append(app.chat.documents.progress))
    drop_file(app, report, hint="Drop to attach the document")
    qtbot.waitUntil(lambda: len(app.chat.documents.pending) == 1, timeout=60_000)
    assert any(p.startswith("Reading annual-report.pdf: page") for p in progress)
    assert not composer.documents.progress.isVisibleTo(composer)  # done reading
    (chip,) = composer.documents.chips
    chip_text = chip.text()
    assert chip_text == f"annual-report.pdf · {PAGES} pages · searched"

    send_and_wait(qtbot, app, FACT_QUESTION)
    sent = _last_question(stub)
    assert set(sent) == {"role", "content"}  # the API's own message shape, nothing added
    assert sent["content"].endswith("\n\n" + FACT_QUESTION)
    assert f"[1] annual-report.pdf, page {FACT_PAGE}:" in sent["content"]
    assert _flat(FACT) in _flat(sent["content"])
    assert composer.documents.chips == []  # sent with the question

    question, reply = app.window.chat_page.transcript.widgets
    assert [c.text() for c in question.document_chips] == [chip_text]
    assert question.text_label.text() == FACT_QUESTION  # the bubble shows the question only
    sources = reply.sources
    assert sources.isVisibleTo(reply)
    assert sources.title.text() == "Sources · annual-report.pdf"
    assert sources.buttons[0].text() == f"[1] page {FACT_PAGE}"
    sources.buttons[0].click()
    assert sources.passage.isVisibleTo(reply)
    assert "4,812,000 kroner" in sources.passage.text()
    assert sources.passage.text().startswith(f"annual-report.pdf, page {FACT_PAGE}")


def test_a_reopened_chat_does_not_read_its_documents_again(
    qtbot, stub, make_app, report, monkeypatch
):
    app = make_app(stub.url)
    drop_file(app, report, hint="Drop to attach the document")
    qtbot.waitUntil(lambda: len(app.chat.documents.pending) == 1, timeout=60_000)
    send_and_wait(qtbot, app, FACT_QUESTION)
    first = _last_question(stub)
    chat_id = app.chat.chat.id

    reads: list[object] = []
    from hearth.documents import prepare, readers
    from hearth.ui.controllers import documents as ui_documents

    def reader(*args, **kwargs):
        reads.append(args)
        raise AssertionError("the document was read again")

    monkeypatch.setattr(readers, "read_document", reader)
    monkeypatch.setattr(prepare, "read_document", reader)
    monkeypatch.setattr(ui_documents, "prepare_document", reader)

    app.chat.new_chat()
    assert app.window.chat_page.transcript.widgets == []
    app.chat.open_chat(chat_id)
    question, reply = app.window.chat_page.transcript.widgets
    assert [c.text() for c in question.document_chips] == [
        f"annual-report.pdf · {PAGES} pages · searched"
    ]
    assert reply.sources.buttons[0].text() == f"[1] page {FACT_PAGE}"
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        app.window.act_regenerate.trigger()
    assert _last_question(stub) == first  # the same prompt, from the history database
    assert reads == []


def test_an_unreadable_document_is_a_sentence_and_nothing_is_lost(qtbot, stub, make_app, tmp_path):
    app = make_app(stub.url)
    composer = app.window.chat_page.composer
    composer.edit.setPlainText("my draft question")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n garbage")
    drop_file(app, broken, hint="Drop to attach the document")
    toast = app.window.toast.label
    qtbot.waitUntil(lambda: "broken.pdf is damaged" in toast.text(), timeout=30_000)
    assert app.chat.documents.pending == [] and composer.documents.chips == []
    assert composer.edit.toPlainText() == "my draft question"


def test_a_slow_embedding_service_does_not_block_the_window(qtbot, stub, make_app, report):
    """With an embedding model installed, the question's vector comes from /api/embed: a slow
    answer must not freeze the window (the request runs off the GUI thread), and the prompt
    still gets the passages once it arrives."""
    import time

    from PySide6.QtCore import Qt, QTimer
    from stub_server import StubModel

    stub.models.append(StubModel("embedder:latest", capabilities=["embedding"]))
    app = make_app(stub.url)
    qtbot.waitUntil(lambda: app.chat.documents.embedding_model() == "embedder:latest")
    drop_file(app, report, hint="Drop to attach the document")
    qtbot.waitUntil(lambda: len(app.chat.documents.pending) == 1, timeout=60_000)
    assert app.chat.documents.pending[0].embed_model == "embedder:latest"

    stub.embed_delay = 2.0
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    edit = app.window.chat_page.composer.edit
    edit.setFocus()
    edit.setPlainText(FACT_QUESTION)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=60_000):
        pressed = time.monotonic()
        qtbot.keyClick(edit, Qt.Key.Key_Return)
        returned = time.monotonic()
        assert app.chat.busy  # a second question cannot be sent meanwhile
        assert not app.chat.send("another question")
    timer.stop()
    assert returned - pressed < 1.0  # sending returned at once
    during = [t for t in ticks if t >= pressed]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
    assert during and during[-1] - pressed > 1.5  # the event loop ran while the service waited
    assert max(gaps) < 1.0
    embeds = [r for r in stub.requests if r["path"] == "/api/embed"]
    assert embeds[-1]["input"] == [FACT_QUESTION]
    sent = _last_question(stub)
    assert f"[1] annual-report.pdf, page {FACT_PAGE}:" in sent["content"]


def test_a_scanned_page_is_read_by_the_vision_model_with_progress_and_cited(
    qtbot, stub, make_app, tmp_path
):
    """The chat's model cannot see; an installed vision model reads the scanned page on the
    worker thread (the progress line names the page), once: the question's prompt carries its
    text marked as read from an image, and the reply's source says so."""
    from documents.make_documents import scanned_text_pdf, text_picture
    from stub_server import StubModel

    from hearth.documents.scanned import TRANSCRIBE_PROMPT

    said = "INVOICE 4471 Total due: 312 euros"
    stub.models.append(StubModel("seer:latest", capabilities=["completion", "vision"]))
    stub.script = [{"content": said}, {"content": "It is 312 euros [1]."}]
    pdf = scanned_text_pdf(tmp_path / "supplier.pdf", [text_picture(["INVOICE 4471"])])
    app = make_app(stub.url)
    progress: list[str] = []
    app.chat.attachments_changed.connect(lambda: progress.append(app.chat.documents.progress))
    drop_file(app, pdf, hint="Drop to attach the document")
    qtbot.waitUntil(lambda: len(app.chat.documents.pending) == 1, timeout=60_000)
    assert "Reading supplier.pdf: page 2 from its image with seer:latest (1 of 1)…" in progress
    (asked,) = [r for r in stub.requests if r["path"] == "/api/chat"]
    (message,) = asked["messages"]
    assert asked["model"] == "seer:latest" and message["content"] == TRANSCRIBE_PROMPT
    assert len(message["images"]) == 1  # the page, rendered
    (notes,) = [c.notes for c in app.chat.document_chips()]
    assert "read from an image of the page by seer:latest" in notes[0]

    send_and_wait(qtbot, app, "What is the total of invoice 4471?")
    chats = [r for r in stub.requests if r["path"] == "/api/chat"]
    assert len(chats) == 2 and chats[-1]["model"] == app.chat.model  # read once
    assert f"[read from an image of page 2]\n{said}" in _last_question(stub)["content"]
    _question, reply = app.window.chat_page.transcript.widgets
    texts = [b.text() for b in reply.sources.buttons]
    assert "read from an image of page 2" in texts
