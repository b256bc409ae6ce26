"""Pictures in a chat, on the stub service (fast; test_vision.py runs the same story on a real
vision model): regenerating and editing send the question's pictures again, a reopened chat
shows them, the Models page marks vision models, and a text-only model is explained before
anything is lost."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QColor, QImage, QImageWriter
from stub_server import StubModel

from hearth.history.records import DONE, ERROR
from hearth.ui.controllers.images import attachable_images, png_bytes
from hearth.ui.item_models.model_list import ModelRow

from support.ui import file_drop, send_and_wait

VISION = "gemma3:4b"


def _picture(colour: str = "teal", fmt: bytes = b"png") -> bytes:
    image = QImage(24, 16, QImage.Format.Format_RGB32)
    image.fill(QColor(colour))
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    QImageWriter(buf, QByteArray(fmt)).write(image)
    return bytes(data.data())


@pytest.fixture
def vision_app(stub, make_app):
    stub.models.append(StubModel(VISION, capabilities=["completion", "vision"]))
    app = make_app(stub.url)
    app.chat.set_model(VISION)
    return app


def _chat_requests(stub):
    return [r for r in stub.requests if r["path"] == "/api/chat"]


def test_regenerate_and_edit_send_the_pictures_again(qtbot, stub, vision_app):
    app = vision_app
    assert app.chat.attach_images([_picture()])
    send_and_wait(qtbot, app, "what is this?")
    sent = _chat_requests(stub)[-1]["messages"][-1]
    assert sent["role"] == "user" and len(sent["images"]) == 1
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        app.window.act_regenerate.trigger()
    again = _chat_requests(stub)[-1]["messages"]
    assert again[-1] == sent  # the same question, the same picture
    user = app.chat.conversation.items()[0]
    widget = app.window.chat_page.transcript.widget_for(user.id)
    widget.start_edit()
    widget.edit_box.setPlainText("and in one word?")
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        widget._submit_edit()
    edited = _chat_requests(stub)[-1]["messages"][-1]
    assert edited["content"] == "and in one word?" and edited["images"] == sent["images"]


def test_a_reopened_chat_shows_its_pictures(qtbot, stub, vision_app):
    app = vision_app
    first, second = _picture("teal"), _picture("orange")
    app.chat.attach_images([first, second])
    composer = app.window.chat_page.composer
    assert len(composer.thumbnails) == 2 and composer.strip.isVisible()
    send_and_wait(qtbot, app, "compare these")
    assert composer.thumbnails == [] and not composer.strip.isVisible()
    chat_id = app.chat.chat.id
    app.chat.new_chat()
    assert app.window.chat_page.transcript.widgets == []
    sidebar, chats = app.window.sidebar, app.history.model
    row = next(r for r in range(chats.rowCount()) if chats.chat_id(r) == chat_id)
    sidebar.list.clicked.emit(chats.index(row, 0))
    user = app.window.chat_page.transcript.widgets[0]
    assert user.item.images == [first, second]
    assert [t.pixmap().toImage().pixelColor(2, 2).name() for t in user.thumbnails] == [
        "#008080",
        "#ffa500",
    ]
    assert app.window.chat_page.transcript.widgets[1].thumbnails == []  # the reply has none


def test_the_models_page_marks_vision_models(qtbot, stub, make_app):
    stub.models.append(StubModel(VISION, capabilities=["completion", "vision"]))
    app = make_app(stub.url)
    page = app.window.models_page
    page.select_name(VISION)
    assert page.badge_row.isVisibleTo(page) and set(page.badges) == {"completion", "vision"}
    assert page.badges["vision"].text() == "Vision"
    assert "Sees images" in page.badges["vision"].toolTip()
    assert page.d_fields["caps"].text() == "completion, vision"
    models, row = app.models.model, app.models.model.row_of(VISION)
    assert models.index(row, 6).data() == "Vision"  # the table's Capabilities column
    assert models.index(models.row_of("gemma3:270m"), 6).data() == "Chat"
    tip = models.index(row, 0).data(Qt.ItemDataRole.ToolTipRole)  # the model chooser's too
    assert "Vision: Sees images" in tip
    page.select_name("gemma3:270m")
    assert set(page.badges) == {"completion"}


def test_tags_tell_vision_before_show_answers():
    clip = {"name": "llava:7b", "details": {"family": "llama", "families": ["llama", "clip"]}}
    assert ModelRow.from_tag(clip).vision
    listed = {"name": "m", "capabilities": ["completion", "vision"]}
    assert ModelRow.from_tag(listed).vision
    assert not ModelRow.from_tag({"name": "plain", "details": {"families": ["llama"]}}).vision


def test_attach_on_a_text_only_model_says_why_before_the_file_dialog(
    qtbot, stub, make_app, monkeypatch
):
    app = make_app(stub.url)
    asked = []
    monkeypatch.setattr(app.window.dialogs, "pick_images", lambda: asked.append(1) or [])
    app.window.act_attach.trigger()  # Ctrl+O
    assert asked == [] and "cannot see images" in app.window.toast.label.text()
    composer = app.window.chat_page.composer
    assert "cannot see images" in composer.attach_btn.toolTip()


def test_a_text_only_model_refuses_the_picture_and_nothing_is_lost(
    qtbot, stub, vision_app, tmp_path
):
    app = vision_app
    composer = app.window.chat_page.composer
    png = tmp_path / "pic.png"
    png.write_bytes(_picture())
    assert app.drops.handle(file_drop(png))
    assert not composer.images_note.isVisibleTo(composer)
    app.chat.set_model("gemma3:270m")  # the picture is still attached: say it will not go
    assert composer.images_note.isVisibleTo(composer)
    assert "cannot see images" in composer.images_note.text()
    send_and_wait(qtbot, app, "what is in the picture?")
    reply = app.chat.conversation.items()[-1]
    assert reply.state == ERROR
    assert reply.error.startswith("gemma3:270m does not support images.")  # the service's
    assert "Try again" in reply.error
    widget = app.window.chat_page.transcript.widget_for(reply.id)
    assert widget.error_card.isVisible() and "does not support images" in widget.error_label.text()
    user = app.chat.conversation.items()[0]
    assert user.content == "what is in the picture?" and len(user.images) == 1
    assert app.store.message(user.id).images == user.images
    assert not composer.images_note.isVisibleTo(composer)  # sent: nothing waits any more
    app.chat.set_model(VISION)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        widget.retry_btn.click()
    assert app.chat.conversation.items()[-1].state == DONE
    assert len(_chat_requests(stub)[-1]["messages"][-1]["images"]) == 1


def test_pictures_go_as_the_service_reads_them(qapp):
    png, jpeg, tiff = _picture(), _picture(fmt=b"jpeg"), _picture(fmt=b"tiff")
    assert attachable_images([png, jpeg, b"not a picture"]) == [png, jpeg]
    (converted,) = attachable_images([tiff])
    assert converted.startswith(b"\x89PNG") and converted != tiff
    assert QImage.fromData(converted).size() == QImage.fromData(tiff).size()
    assert png_bytes(QImage.fromData(png)).startswith(b"\x89PNG")
