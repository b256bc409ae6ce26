"""Driving the desktop app in tests/ui as a user would: typing a message and waiting for the
reply, dragging a file onto the window, and calling the real service's API beside it."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Qt itself is imported where used, after QT_QPA_PLATFORM is set
    from PySide6.QtCore import QMimeData


def send_and_wait(qtbot, app, text: str, timeout: int = 120_000) -> None:
    """Type `text` into the composer, press Enter, wait for the reply to finish."""
    from PySide6.QtCore import Qt

    edit = app.window.chat_page.composer.edit
    edit.setFocus()
    edit.setPlainText(text)
    with qtbot.waitSignal(app.chat.reply_finished, timeout=timeout):
        qtbot.keyClick(edit, Qt.Key.Key_Return)


def file_drop(path: Path) -> QMimeData:
    """The QMimeData that dragging the file at `path` onto the window carries."""
    from PySide6.QtCore import QMimeData, QUrl

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    return mime


def service_api(service: dict, path: str, body: dict) -> dict:
    """POST (DELETE for /api/delete) `body` to the real service's `path` with its key; the
    JSON reply ({} when empty)."""
    import json

    req = urllib.request.Request(
        service["url"] + path,
        data=json.dumps(body).encode(),
        method="DELETE" if path == "/api/delete" else "POST",
        headers={
            "Authorization": f"Bearer {service['token']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        text = resp.read().decode()
    return json.loads(text) if text.strip() else {}


def drop_file(app: object, path: Path, hint: str = "Drop to attach the image") -> None:
    """Drag the file at `path` over `app`'s message box and let go, as a user would (the
    overlay shows `hint` while dragging, and hides after the drop)."""
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication

    window = app.window  # type: ignore[attr-defined]
    target = window.chat_page.composer.edit.viewport()
    where, mime = target.rect().center(), file_drop(path)
    action, button = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
    mods = Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(where, action, mime, button, mods)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    assert window.overlay.label.text() == hint
    QApplication.sendEvent(target, QDropEvent(QPointF(where), action, mime, button, mods))
    assert not window.overlay.isVisible()


def wait_card(qtbot, app):
    """The tool call's approval card, once the transcript shows it."""
    transcript = app.window.chat_page.transcript
    qtbot.waitUntil(lambda: transcript.approval is not None, timeout=30_000)
    return transcript.approval


def ask(qtbot, app, text: str) -> None:
    """Type `text` in the composer and press Return (no wait for the reply)."""
    from PySide6.QtCore import Qt

    edit = app.window.chat_page.composer.edit
    edit.setPlainText(text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)
