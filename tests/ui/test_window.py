"""The window itself (against the stub service): accessibility, keyboard, pages, settings."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDialog,
    QLineEdit,
    QPlainTextEdit,
    QTextBrowser,
    QWidget,
)

from support.ui import file_drop, send_and_wait

_CONTROLS = (
    QAbstractButton,
    QLineEdit,
    QComboBox,
    QAbstractSpinBox,
    QPlainTextEdit,
    QAbstractItemView,
    QTextBrowser,
)


def _unnamed(root):
    missing = []
    for w in root.findChildren(QWidget):
        if not isinstance(w, _CONTROLS):
            continue
        if isinstance(w, QLineEdit) and isinstance(w.parent(), QAbstractSpinBox | QComboBox):
            continue  # the editor inside a spin or combo box: its owner carries the name
        parent = type(w.parent()).__name__ if w.parent() is not None else ""
        if w.objectName().startswith("qt_") or parent.startswith("QComboBox"):
            continue  # Qt's own parts (a combo's popup list, a table's corner button)
        if isinstance(w.parent(), QLineEdit) or type(w).__name__ == "QHeaderView":
            continue  # a line edit's clear button; a table's header belongs to the table
        iface = QAccessible.queryAccessibleInterface(w)
        # What a screen reader reads: the accessible name, or a button's own text.
        if not (iface and iface.text(QAccessible.Text.Name).strip()):
            missing.append(f"{type(w).__name__} {w.objectName()} {getattr(w, 'text', str)()!r}")
    return missing


def test_every_control_has_an_accessible_name(qtbot, stub, make_app):
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "hello")  # message widgets with their buttons
    assert _unnamed(app.window) == []
    app.window.chat_page.settings_btn.click()
    dlg = next(d for d in app.window.findChildren(QDialog) if d.isVisible())
    assert _unnamed(dlg) == []
    dlg.reject()


def test_enter_sends_shift_enter_adds_a_line(qtbot, stub, make_app):
    app = make_app(stub.url)
    edit = app.window.chat_page.composer.edit
    edit.setFocus()
    qtbot.keyClicks(edit, "line one")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "line two")
    assert edit.toPlainText() == "line one\nline two"
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == ""
    assert app.chat.conversation.items()[0].content == "line one\nline two"
    stats = app.window.chat_page.transcript.widgets[-1].stats_label.text()
    assert "tok/s" in stats and "to first token" in stats and "tokens" in stats
    assert app.window.chat_page.meter.used > 0


def test_shortcuts_sheet_and_pages_by_keyboard(qtbot, stub, make_app):
    app = make_app(stub.url)
    w = app.window
    w.act_help.trigger()
    sheet = next(d for d in w.findChildren(QDialog) if d.isVisible())
    assert sheet.windowTitle() == "Keyboard shortcuts"
    sheet.reject()
    w.act_models.trigger()
    assert w.stack.currentWidget() is w.models_page
    w.act_settings.trigger()
    assert w.stack.currentWidget() is w.settings_page
    w.act_focus.trigger()
    assert w.stack.currentWidget() is w.chat_page
    assert QApplication.focusWidget() is w.chat_page.composer.edit


def test_chat_settings_reach_the_request(qtbot, stub, make_app):
    app = make_app(stub.url)
    app.chat.update_chat_settings("Be brief.", {"temperature": 0.2, "seed": 7})
    send_and_wait(qtbot, app, "hi")
    body = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["options"]["temperature"] == 0.2 and body["options"]["seed"] == 7
    assert "num_ctx" not in body["options"]  # "Automatic": the service decides
    app.settings.num_ctx = 8192  # a length the user chose goes with every request
    send_and_wait(qtbot, app, "again")
    body = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
    assert body["options"]["num_ctx"] == 8192


def test_import_by_drop_and_delete(qtbot, stub, make_app, tmp_path):
    app = make_app(stub.url)
    gguf = tmp_path / "My-Model.Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    mime = file_drop(gguf)
    assert app.drops.kind(mime) == "model"
    with qtbot.waitSignal(app.models.import_finished, timeout=10_000) as done:
        app.drops.handle(mime)
    assert done.args[:2] == ["my-model.q4_k_m:latest", True]
    qtbot.waitUntil(lambda: "my-model.q4_k_m:latest" in app.models.names(), timeout=5_000)
    page = app.window.models_page
    page.select_name("my-model.q4_k_m:latest")
    qtbot.waitUntil(lambda: page.d_fields["memory"].text() != "—", timeout=5_000)
    assert page.d_fields["caps"].text() == "completion"
    page.confirm_delete = lambda name: True  # the confirmation box answered "Yes"
    with qtbot.waitSignal(app.models.deleted, timeout=5_000):
        page.delete_btn.click()
    qtbot.waitUntil(lambda: "my-model.q4_k_m:latest" not in app.models.names(), timeout=5_000)


def test_theme_switch_and_settings_page(qtbot, stub, make_app):
    app = make_app(stub.url)
    page = app.window.settings_page
    page.theme.setCurrentIndex(page.theme.findData("dark"))
    page.theme.activated.emit(page.theme.currentIndex())
    assert app.settings_ctrl.palette.dark
    assert app.window.palette().window().color().lightness() < 80
    assert not page.warning.isVisible()
    assert "Off" in page.api_status.text()


def test_search_rename_delete_from_the_sidebar(qtbot, stub, make_app):
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "Tell me about volcanoes")
    first = app.chat.chat.id
    app.chat.new_chat()
    send_and_wait(qtbot, app, "Bake sourdough bread")
    sb = app.window.sidebar
    qtbot.keyClicks(sb.search, "volc")
    assert app.history.model.rowCount() == 1
    assert app.history.model.chat_id(0) == first
    sb.search.clear()
    assert app.history.model.rowCount() == 2
    app.history.rename(first, "Volcanoes")
    assert app.store.chat(first).title == "Volcanoes"
    app.history.delete(first)
    assert app.history.model.rowCount() == 1


def test_sidebar_rename_and_delete_ask_first(qtbot, stub, make_app, monkeypatch):
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "Tell me about volcanoes")
    first = app.chat.chat.id
    app.chat.new_chat()
    send_and_wait(qtbot, app, "Bake sourdough bread")
    second = app.chat.chat.id
    sb, dialogs = app.window.sidebar, app.window.dialogs
    asked = []
    monkeypatch.setattr(dialogs, "ask_chat_title", lambda title: asked.append(title) or "Bread")
    sb.rename_requested.emit(second)  # F2 on the chat list
    assert asked == ["Bake sourdough bread"]
    assert app.chat.chat.title == "Bread" and app.window.windowTitle() == "Bread — Hearth"
    monkeypatch.setattr(dialogs, "confirm_delete_chat", lambda title: False)
    sb.delete_requested.emit(second)  # Delete on the chat list, answered No
    assert app.store.chat(second) is not None
    monkeypatch.setattr(dialogs, "confirm_delete_chat", lambda title: title == "Bread")
    sb.delete_requested.emit(second)
    assert app.store.chat(second) is None
    assert app.chat.chat.id == first  # the open chat went: the newest left opens
    assert app.history.model.chat_id(0) == first
    assert sb.list.currentIndex().row() == 0


def test_the_chat_settings_dialog_applies_what_is_ticked(qtbot, stub, make_app):
    app = make_app(stub.url)
    app.window.act_chat_settings.trigger()  # Ctrl+;
    dlg = next(d for d in app.window.findChildren(QDialog) if d.isVisible())
    dlg.system.setPlainText("Be brief.")
    box, spin = dlg.rows["temperature"]
    box.setChecked(True)
    spin.setValue(0.3)
    dlg.accept()
    assert app.chat.chat.system_prompt == "Be brief."
    assert app.chat.chat.options == {"temperature": 0.3}


def test_the_chat_settings_dialog_shows_the_model_s_defaults_else_ollama_s(qtbot, stub, make_app):
    """Unticked rows show what applies: the model's parameters (the stub's: temperature 1,
    top_k 64, top_p 0.95), else Ollama's defaults (min_p 0, repeat_penalty 1.1, seed -1)."""
    app = make_app(stub.url)
    app.window.act_chat_settings.trigger()
    dlg = next(d for d in app.window.findChildren(QDialog) if d.isVisible())
    shown = {key: spin.value() for key, (_box, spin) in dlg.rows.items()}
    dlg.reject()
    expected = {"temperature": 1, "top_k": 64, "top_p": 0.95, "min_p": 0, "repeat_penalty": 1.1}
    assert {k: round(shown[k], 2) for k in expected} == expected
    assert (shown["seed"], shown["num_predict"]) == (-1, -1)


def test_thinking_is_collapsible_and_code_has_a_copy_link(qtbot, stub, make_app):
    from stub_server import StubModel

    stub.models.append(StubModel("qwen3:1.7b", capabilities=["completion", "thinking"]))
    stub.thinking = "The user wants code. Keep it short."
    stub.reply = "Here:\n\n```python\nprint('hi')\n```\n"
    app = make_app(stub.url)
    app.chat.set_model("qwen3:1.7b")
    assert app.window.chat_page.composer.think_btn.isVisible()
    send_and_wait(qtbot, app, "code please")
    body = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
    assert body["think"] is True
    w = app.window.chat_page.transcript.widgets[-1]
    assert w.think_btn.isVisible() and w.think_btn.text().startswith("▸ Thought for")
    assert not w.think_box.isVisible()
    w.think_btn.click()
    assert w.think_box.isVisible() and "Keep it short" in w.thinking_view.toPlainText()
    assert app.chat.conversation.items()[-1].thinking.startswith("The user wants code")
    w.body.anchorClicked.emit(QUrl("copy:0"))  # the "Copy" link above the code block
    assert QApplication.clipboard().text() == "print('hi')"


def test_pasting_an_image_attaches_it_for_a_vision_model(qtbot, stub, make_app):
    from PySide6.QtGui import QColor, QImage
    from stub_server import StubModel

    stub.models.append(StubModel("gemma3:4b", capabilities=["completion", "vision"]))
    app = make_app(stub.url)
    app.chat.set_model("gemma3:4b")
    image = QImage(20, 20, QImage.Format.Format_RGB32)
    image.fill(QColor("teal"))
    mime = QMimeData()
    mime.setImageData(image)
    app.window.chat_page.composer.edit.insertFromMimeData(mime)  # what Ctrl+V does
    assert len(app.chat.pending_images) == 1
    app.window.chat_page.composer.remove_attachment.emit(0)
    assert app.chat.pending_images == []


def test_a_file_dragged_onto_any_part_of_the_window_is_taken(qtbot, stub, make_app, tmp_path):
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QDragEnterEvent, QDropEvent

    app = make_app(stub.url)
    gguf = tmp_path / "dropped.gguf"
    gguf.write_bytes(b"GGUF")
    mime = file_drop(gguf)
    target = app.window.chat_page.composer.edit.viewport()  # a text box would take it as text
    actions = Qt.DropAction.CopyAction
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(target.rect().center(), actions, mime, buttons, mods)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted() and app.window.overlay.isVisible()
    assert app.window.overlay.label.text() == "Drop to import this model"
    drop = QDropEvent(QPointF(target.rect().center()), actions, mime, buttons, mods)
    with qtbot.waitSignal(app.models.import_finished, timeout=10_000):
        QApplication.sendEvent(target, drop)
    assert not app.window.overlay.isVisible()
    assert app.window.chat_page.composer.edit.toPlainText() == ""


def test_editing_with_the_keyboard_esc_cancels_enter_resends(qtbot, stub, make_app):
    app = make_app(stub.url)
    send_and_wait(qtbot, app, "first")
    app.window.act_edit_last.trigger()  # Ctrl+E
    w = app.window.chat_page.transcript.widgets[0]
    assert w.editor.isVisible() and QApplication.focusWidget() is w.edit_box
    qtbot.keyClick(w.edit_box, Qt.Key.Key_Escape)
    assert not w.editor.isVisible() and not app.chat.busy
    app.window.act_edit_last.trigger()
    w.edit_box.selectAll()
    qtbot.keyClicks(w.edit_box, "second")
    with qtbot.waitSignal(app.chat.reply_finished, timeout=10_000):
        qtbot.keyClick(w.edit_box, Qt.Key.Key_Return)
    items = app.chat.conversation.items()
    assert items[0].content == "second" and (items[0].version, items[0].versions) == (2, 2)


def test_the_window_is_the_services_word_unless_the_user_set_one(qtbot, make_app):
    """A model whose Modelfile says num_ctx 640: with the app's context length on Automatic
    the request carries none, the window is the 640 the service reports (/api/show before a
    reply, the final record after it); a length the user chose goes with the request."""
    from stub_server import StubModel, StubServer

    stub = StubServer(models=[StubModel("gemma3:270m", num_ctx=640)])
    try:
        app = make_app(stub.url)
        info = app.models.info
        qtbot.waitUntil(lambda: getattr(info("gemma3:270m"), "num_ctx", 0) == 640)
        app.chat.new_chat()
        assert app.chat.num_ctx() == 640
        send_and_wait(qtbot, app, "hi")
        body = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
        assert "num_ctx" not in body["options"]
        reply = app.store.path(app.chat.chat.id)[-1]
        assert reply.stats["num_ctx"] == 640 and app.chat.num_ctx() == 640
        app.settings.num_ctx = 8192
        assert app.chat.num_ctx() == 8192
        send_and_wait(qtbot, app, "again")
        body = [r for r in stub.requests if r["path"] == "/api/chat"][-1]
        assert body["options"]["num_ctx"] == 8192
        assert app.store.path(app.chat.chat.id)[-1].stats["num_ctx"] == 8192
    finally:
        stub.close()
