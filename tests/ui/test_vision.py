"""Images in the desktop app against a real `hearth serve` with a vision model: a tiny random
Gemma 3 and its llama.cpp projector (`build_tiny_gemma3_vision`, converted by llama.cpp's own
converter), registered with `/api/create` `{"from", "projector"}`.

Drop a picture, paste one, ask about them; the pictures are stored with the chat, come back
when the chat is reopened, and are sent again when a reply is regenerated. The tiny model's
answers are gibberish; what is checked is that the pictures reach the model: the prompt the
service reports (`prompt_tokens`, the whole prompt) grows by the image's tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from hearth.history.records import DONE, ERROR
from hearth.plugins.testing import ConverterUnavailableError, sample_images
from hearth_gemma3.testing import build_tiny_gemma3_vision

from support.ui import drop_file, service_api

pytestmark = pytest.mark.slow

MODEL = "tiny-vision:latest"
TEXT_ONLY = "gemma3:270m"  # the default model the session's service has
# Sampled (seeded) rather than greedy: the tiny model's greedy answer is all line breaks.
OPTIONS = {"num_predict": 8, "temperature": 1.0, "seed": 7, "num_ctx": 512}
IMAGES = sample_images()
IMAGE_TOKENS = 16  # the tiny model's tokens per image (TinyGemma3Vision.tokens_per_image)


@pytest.fixture(scope="module")
def vision_model(
    tmp_path_factory: pytest.TempPathFactory, real_service: dict[str, Any]
) -> Iterator[str]:
    """The tiny vision pair, registered with the session's service (removed afterwards)."""
    try:
        files = build_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3-vision"))
    except ConverterUnavailableError as e:
        pytest.skip(str(e))
    body = {
        "model": MODEL,
        "from": str(files.text),
        "projector": str(files.mmproj),
        "stream": False,
    }
    service_api(real_service, "/api/create", body)
    show = service_api(real_service, "/api/show", {"model": MODEL})
    assert "vision" in show["capabilities"]
    yield MODEL
    service_api(real_service, "/api/delete", {"model": MODEL})


def _app(make_app, real_service):
    app = make_app(real_service["url"], real_service["token"])
    app.chat.new_chat(MODEL)
    app.chat.update_chat_settings("", dict(OPTIONS))
    return app


def _ask(qtbot, app, text: str) -> Any:
    """Type `text`, press Enter, wait for the reply; the reply's item."""
    edit = app.window.chat_page.composer.edit
    edit.setFocus()
    edit.setPlainText(text)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=120_000) as finished:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    reply = app.chat.conversation.items()[-1]
    assert finished.args == [reply.id, reply.state]
    return reply


def _thumbnails(app) -> list[list[QImage]]:
    """The pictures each user bubble on screen shows."""
    return [
        [label.pixmap().toImage() for label in w.thumbnails]
        for w in app.window.chat_page.transcript.widgets
        if w.item.role == "user"
    ]


def test_ask_about_a_dropped_and_a_pasted_picture_reopen_and_regenerate(
    qtbot, make_app, real_service, vision_model, tmp_path
):
    app = _app(make_app, real_service)
    page = app.window.chat_page
    assert app.models.info(MODEL).vision

    # 1. a text-only question first, in its own chat: the size of the prompt without a picture
    plain = _ask(qtbot, app, "what is this?")
    assert plain.state == DONE, plain.error
    text_prompt = plain.stats["prompt_tokens"]

    # 2. a dropped picture: its thumbnail waits in the composer, then goes with the question
    app.chat.new_chat(MODEL)
    app.chat.update_chat_settings("", dict(OPTIONS))
    chat_id = app.chat.chat.id
    photo = tmp_path / "photo.png"
    photo.write_bytes(IMAGES["normal"])
    drop_file(app, photo)
    assert app.chat.pending_images == [IMAGES["normal"]], app.window.toast.label.text()
    assert page.composer.strip.isVisible() and len(page.composer.thumbnails) == 1
    first = _ask(qtbot, app, "what is this?")
    assert first.state == DONE and first.content, first.error
    assert not app.chat.pending_images and not page.composer.strip.isVisible()
    # the picture reached the model: the same words, plus the image's tokens
    assert first.stats["prompt_tokens"] >= text_prompt + IMAGE_TOKENS
    assert app.chat.chat.title == "what is this?"

    # 3. a pasted picture (Ctrl+V of an image on the clipboard) with a second question
    pasted = QImage.fromData(IMAGES["tall"])
    QApplication.clipboard().setImage(pasted)
    page.composer.edit.setFocus()
    qtbot.keyClick(page.composer.edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert len(app.chat.pending_images) == 1 and len(page.composer.thumbnails) == 1
    second = _ask(qtbot, app, "and this one?")
    assert second.state == DONE and second.content, second.error
    both = second.stats["prompt_tokens"]
    assert both >= first.stats["prompt_tokens"] + first.stats["eval_count"] + IMAGE_TOKENS

    # the history store holds each picture with its message
    user1, _, user2, _ = app.store.path(chat_id)
    assert user1.images == [IMAGES["normal"]]
    assert len(user2.images) == 1
    assert QImage.fromData(user2.images[0]).size() == pasted.size()
    shown = _thumbnails(app)
    assert [len(t) for t in shown] == [1, 1]

    # 4. reopen from history (a new app on the same history, the chat picked in the sidebar)
    app.shutdown()
    again = make_app(real_service["url"], real_service["token"])
    sidebar = again.window.sidebar
    rows = [again.history.model.chat_id(r) for r in range(again.history.model.rowCount())]
    sidebar.list.clicked.emit(again.history.model.index(rows.index(chat_id), 0))
    assert again.chat.chat.id == chat_id
    thumbs = _thumbnails(again)
    assert [len(t) for t in thumbs] == [1, 1]
    assert all(not img.isNull() and img.width() > 0 for t in thumbs for img in t)
    assert [m.images for m in again.chat.conversation.items()[::2]] == [
        user1.images,
        user2.images,
    ]

    # 5. regenerate the last reply: both pictures go again (the same whole prompt)
    notices: list[tuple[str, str]] = []
    again.chat.notice.connect(lambda level, text: notices.append((level, text)))
    with qtbot.waitSignal(again.chat.reply_finished, timeout=120_000):
        again.window.act_regenerate.trigger()
    redo = again.chat.conversation.items()[-1]
    assert redo.state == DONE and redo.id != second.id, redo.error
    assert (redo.version, redo.versions) == (2, 2)
    assert redo.stats["prompt_tokens"] == both
    assert not [n for n in notices if n[0] == "error"]


def test_a_text_only_model_given_a_picture_says_so_and_nothing_is_lost(
    qtbot, make_app, real_service, vision_model, tmp_path
):
    app = _app(make_app, real_service)
    page = app.window.chat_page
    photo = tmp_path / "photo.png"
    photo.write_bytes(IMAGES["normal"])
    drop_file(app, photo)
    assert len(app.chat.pending_images) == 1
    # the user switches to a text-only model with the picture still attached
    app.chat.set_model(TEXT_ONLY)
    failed = _ask(qtbot, app, "describe the picture")
    assert failed.state == ERROR
    assert f"{TEXT_ONLY} does not support images" in failed.error  # the service's sentence
    widget = page.transcript.widget_for(failed.id)
    assert widget.error_card.isVisible() and widget.retry_btn.isEnabled()
    # nothing is lost: the question and its picture are kept, on screen and in the history
    user = app.chat.conversation.items()[0]
    assert user.content == "describe the picture" and user.images == [IMAGES["normal"]]
    assert app.store.message(user.id).images == [IMAGES["normal"]]
    assert [len(t) for t in _thumbnails(app)] == [1]
    # pick the vision model again and try again: the same question and picture are answered
    app.chat.set_model(MODEL)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=120_000):
        widget.retry_btn.click()
    retried = app.chat.conversation.items()[-1]
    assert retried.state == DONE and retried.content, retried.error
    assert retried.stats["prompt_tokens"] > IMAGE_TOKENS
