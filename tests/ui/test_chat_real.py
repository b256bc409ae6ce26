"""The chat against a real `hearth serve` running the default model (Gemma 3 270M).

Replies are kept short (num_predict) so the whole file runs in well under a minute of
generation on two cores; what is checked is the app's behaviour, not the model's wisdom.
"""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QImage

from hearth.history.records import DONE, STOPPED
from hearth.ui.app import HearthApp

from support.ui import file_drop, send_and_wait

pytestmark = pytest.mark.slow

SHORT = {"num_predict": 10, "temperature": 0.0, "seed": 1}


def _app(make_app, real_service, options=SHORT):
    app = make_app(real_service["url"], real_service["token"])
    app.chat.update_chat_settings("", dict(options))
    return app


def test_send_streams_a_reply_with_its_numbers(qtbot, make_app, real_service):
    app = _app(make_app, real_service)
    updates = []
    app.chat.conversation.dataChanged.connect(lambda *_: updates.append(1))
    send_and_wait(qtbot, app, "Why is the sky blue?")
    user, reply = app.chat.conversation.items()
    assert user.content == "Why is the sky blue?"
    assert reply.state == DONE and reply.content.strip()
    assert len(updates) >= 3  # streamed piece by piece, not in one go
    assert reply.stats["eval_count"] >= 1 and reply.stats["tokens_per_second"] > 0
    assert reply.stats["ttft"] > 0 and reply.stats["prompt_eval_count"] > 0
    assert app.chat.chat.title == "Why is the sky blue?"
    meter = app.window.chat_page.meter
    assert meter.used == reply.stats["prompt_tokens"] + reply.stats["eval_count"]
    assert meter.capacity == 4096


def test_stop_keeps_what_was_written(qtbot, make_app, real_service):
    app = _app(make_app, real_service, {"num_predict": 400, "temperature": 0.0})
    comp = app.window.chat_page.composer
    comp.edit.setPlainText("Write a long story about a lighthouse keeper.")
    comp._submit()
    assert comp.send_btn.text() == "Stop"
    qtbot.waitUntil(lambda: len(app.chat.conversation.items()[-1].content) > 0, timeout=60_000)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=30_000) as finished:
        comp.send_btn.click()  # the Send button is Stop while a reply streams
    assert finished.args[1] == STOPPED
    reply = app.chat.conversation.items()[-1]
    assert reply.content and app.store.message(reply.id).content == reply.content
    assert comp.send_btn.text() == "Send"


def test_regenerate_edit_to_a_branch_and_switch_back(qtbot, make_app, real_service):
    app = _app(make_app, real_service)
    chat = app.chat
    send_and_wait(qtbot, app, "Name a colour.")
    first_reply = chat.conversation.items()[-1]
    with qtbot.waitSignal(chat.reply_finished, timeout=120_000):
        app.window.act_regenerate.trigger()  # Ctrl+R
    items = chat.conversation.items()
    assert (items[-1].version, items[-1].versions) == (2, 2)
    assert items[-1].id != first_reply.id
    # edit the question: a new branch; the original question is one version back
    transcript = app.window.chat_page.transcript
    widget = transcript.widget_for(items[0].id)
    widget.start_edit()
    widget.edit_box.setPlainText("Name a fruit.")
    with qtbot.waitSignal(chat.reply_finished, timeout=120_000):
        widget._submit_edit()
    items = chat.conversation.items()
    assert items[0].content == "Name a fruit." and (items[0].version, items[0].versions) == (2, 2)
    assert len(items) == 2
    # ◀ on the question goes back to the original branch, with its newest reply
    transcript.widget_for(items[0].id).prev_btn.click()
    items = chat.conversation.items()
    assert items[0].content == "Name a colour."
    assert (items[1].version, items[1].versions) == (2, 2)
    app.window.act_prev_version.trigger()  # Alt+Left on the last reply
    assert chat.conversation.items()[-1].id == first_reply.id


def test_image_drop_on_the_text_only_default_model_is_explained(
    qtbot, make_app, real_service, tmp_path
):
    app = make_app(real_service["url"], real_service["token"])
    assert app.models.info("gemma3:270m").capabilities == ["completion"]
    img = QImage(16, 16, QImage.Format.Format_RGB32)
    img.fill(QColor("white"))
    img.save(str(tmp_path / "photo.jpg"))
    mime = file_drop(tmp_path / "photo.jpg")
    assert not app.drops.handle(mime)
    assert "cannot see images" in app.window.toast.label.text()
    assert app.chat.pending_images == []


def test_drop_a_gguf_imports_and_lists_it(qtbot, make_app, real_service, tiny_llama_path):
    app = make_app(real_service["url"], real_service["token"])
    mime = file_drop(tiny_llama_path)
    with qtbot.waitSignal(app.models.import_finished, timeout=60_000) as done:
        assert app.drops.handle(mime)
        assert app.window.models_page.progress_row.isVisible()
    name, ok, message = done.args
    assert ok, message
    qtbot.waitUntil(lambda: (app.models.info(name) or 0) and app.models.info(name).details_loaded)
    info = app.models.info(name)
    assert info.architecture == "llama" and info.size > 0 and info.memory_estimate
    assert "completion" in info.capabilities
    app.models.delete(name)
    qtbot.waitUntil(lambda: name not in app.models.names(), timeout=10_000)


def test_search_and_restart_keep_history(qtbot, make_app, real_service):
    app = _app(make_app, real_service)
    send_and_wait(qtbot, app, "Tell me about volcanoes")
    chat_id = app.chat.chat.id
    before = [(m.role, m.content, m.state) for m in app.chat.conversation.items()]
    app.chat.new_chat()
    qtbot.keyClicks(app.window.sidebar.search, "volcano")
    assert app.history.model.rowCount() == 1 and app.history.model.chat_id(0) == chat_id
    app.shutdown()
    # a new app on the same data folder: same chats, same conversation
    again = HearthApp(["--server", real_service["url"], f"--api-key={real_service['token']}"])
    qtbot.addWidget(again.window)
    try:
        ids = [again.history.model.chat_id(r) for r in range(again.history.model.rowCount())]
        assert chat_id in ids
        again.chat.open_chat(chat_id)
        after = [(m.role, m.content, m.state) for m in again.chat.conversation.items()]
        assert after == before
    finally:
        again.shutdown()
