"""The message box: Enter sends, Shift+Enter adds a line, Esc stops; images and documents
ride along."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QKeyEvent, QPixmap
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .documents import DocumentStrip

__all__ = ["Composer", "PromptEdit"]

_MAX_LINES = 8


class PromptEdit(QPlainTextEdit):
    submit = Signal()
    stop = Signal()
    files_pasted = Signal(QMimeData)  # images or files: the drop controller decides

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if e.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submit.emit()
            return
        if e.key() == Qt.Key.Key_Escape:
            self.stop.emit()
            return
        super().keyPressEvent(e)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return source.hasImage() or source.hasUrls() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        if source.hasImage() or (source.hasUrls() and any(u.isLocalFile() for u in source.urls())):
            self.files_pasted.emit(source)
            return
        self.insertPlainText(source.text())  # plain text only: no stray formatting


class Composer(QFrame):
    send_requested = Signal(str)
    stop_requested = Signal()
    attach_requested = Signal()
    attach_document_requested = Signal()
    files_pasted = Signal(QMimeData)
    remove_attachment = Signal(int)
    think_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Composer")
        self._busy = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        lay.setSpacing(4)
        self.strip = QWidget()
        self.thumbnails: list[QLabel] = []  # the images waiting to go with the next message
        self._strip_layout = QHBoxLayout(self.strip)
        self._strip_layout.setContentsMargins(0, 0, 0, 4)
        self.strip.hide()
        lay.addWidget(self.strip)
        self.documents = DocumentStrip()  # documents waiting to go, and reading progress
        lay.addWidget(self.documents)
        self.images_note = QLabel()  # why the attached images will be refused, if they will
        self.images_note.setObjectName("Warning")
        self.images_note.setWordWrap(True)
        self.images_note.setAccessibleName(self.tr("About the attached images"))
        self.images_note.hide()
        lay.addWidget(self.images_note)

        self.edit = PromptEdit()
        self.edit.setAccessibleName(self.tr("Message"))
        self.edit.setPlaceholderText(self.tr("Message Hearth…"))
        self.edit.setTabChangesFocus(True)
        self.edit.document().contentsChanged.connect(self._grow)
        self.edit.submit.connect(self._submit)
        self.edit.stop.connect(self.stop_requested)
        self.edit.files_pasted.connect(self.files_pasted)
        lay.addWidget(self.edit)

        row = QHBoxLayout()
        row.setSpacing(6)
        self.attach_btn = QToolButton()
        self.attach_btn.setText(self.tr("+ Image"))
        self.attach_btn.setAccessibleName(self.tr("Attach an image"))
        self.attach_btn.setToolTip(self.tr("Attach an image (Ctrl+O), or drop or paste one"))
        self.doc_btn = QToolButton()
        self.doc_btn.setText(self.tr("+ Document"))
        self.doc_btn.setAccessibleName(self.tr("Attach a document"))
        self.doc_btn.setToolTip(
            self.tr("Attach a PDF, Word, text, Markdown, HTML, CSV or code file, or drop one")
        )
        self.doc_btn.clicked.connect(self.attach_document_requested)
        self.attach_btn.clicked.connect(self.attach_requested)
        self.think_btn = QToolButton()
        self.think_btn.setText(self.tr("Think"))
        self.think_btn.setCheckable(True)
        self.think_btn.setAccessibleName(self.tr("Let the model think before answering"))
        self.think_btn.setToolTip(self.tr("Reasoning models show their thinking first"))
        self.think_btn.toggled.connect(self.think_toggled)
        self.think_btn.hide()
        self.hint = QLabel(self.tr("Enter to send · Shift+Enter for a new line"))
        self.hint.setObjectName("Stats")
        self.send_btn = QPushButton(self.tr("Send"))
        self.send_btn.setObjectName("SendButton")
        self.send_btn.setAccessibleName(self.tr("Send message"))
        self.send_btn.clicked.connect(self._on_button)
        for w in (self.attach_btn, self.doc_btn, self.think_btn):
            row.addWidget(w)
        self._row = row  # `add_button` puts more buttons after these
        row.addStretch(1)
        row.addWidget(self.hint)
        row.addWidget(self.send_btn)
        lay.addLayout(row)
        self._grow()

    def add_button(self, button: QWidget) -> None:
        """Another button beside "+ Document" (the MCP menu)."""
        self._row.insertWidget(self._row.indexOf(self.think_btn) + 1, button)

    def text(self) -> str:
        return self.edit.toPlainText()

    def clear(self) -> None:
        self.edit.clear()

    def _submit(self) -> None:
        if not self._busy:
            self.send_requested.emit(self.text())

    def _on_button(self) -> None:
        if self._busy:
            self.stop_requested.emit()
        else:
            self._submit()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.send_btn.setText(self.tr("Stop") if busy else self.tr("Send"))
        self.send_btn.setAccessibleName(
            self.tr("Stop generating") if busy else self.tr("Send message")
        )
        self.send_btn.setToolTip(self.tr("Stop (Esc)") if busy else self.tr("Send (Enter)"))
        self.send_btn.setProperty("stop", busy)
        self.send_btn.style().unpolish(self.send_btn)
        self.send_btn.style().polish(self.send_btn)

    def set_ready(self, ready: bool) -> None:
        self.send_btn.setEnabled(ready)

    def set_think(self, available: bool, on: bool) -> None:
        self.think_btn.setVisible(available)
        self.think_btn.blockSignals(True)
        self.think_btn.setChecked(on)
        self.think_btn.blockSignals(False)

    def set_attachments(self, images: list[bytes]) -> None:
        while self._strip_layout.count():
            item = self._strip_layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()
                widget.deleteLater()
        self.thumbnails = []
        for n, data in enumerate(images):
            cell = QFrame()
            cl = QHBoxLayout(cell)
            cl.setContentsMargins(0, 0, 0, 0)
            thumb = QLabel()
            pix = QPixmap()
            pix.loadFromData(data)
            thumb.setPixmap(
                pix.scaled(
                    56,
                    56,
                    Qt.AspectRatioMode.KeepAspectRatio,
                    Qt.TransformationMode.SmoothTransformation,
                )
            )
            thumb.setAccessibleName(self.tr("Attached image %1").replace("%1", str(n + 1)))
            self.thumbnails.append(thumb)
            remove = QToolButton()
            remove.setText("✕")
            remove.setAccessibleName(self.tr("Remove image %1").replace("%1", str(n + 1)))
            remove.clicked.connect(lambda _=False, i=n: self.remove_attachment.emit(i))
            cl.addWidget(thumb)
            cl.addWidget(remove, 0, Qt.AlignmentFlag.AlignTop)
            self._strip_layout.addWidget(cell)
        self._strip_layout.addStretch(1)
        self.strip.setVisible(bool(images))

    def set_images_note(self, text: str) -> None:
        """A warning about the attached images ('' hides it)."""
        self.images_note.setText(text)
        self.images_note.setVisible(bool(text))

    def set_vision(self, refused: str) -> None:
        """Whether the chat's model takes pictures: `refused` says why not ('' when it does)."""
        self.attach_btn.setToolTip(
            refused or self.tr("Attach an image (Ctrl+O), or drop or paste one")
        )

    def _grow(self) -> None:
        # Grow with the text up to _MAX_LINES, then scroll inside.
        lines = max(1, min(_MAX_LINES, self.edit.document().size().height()))
        line_h = self.edit.fontMetrics().lineSpacing()
        self.edit.setFixedHeight(int(lines * line_h + 18))
        policy = Qt.ScrollBarPolicy
        self.edit.setVerticalScrollBarPolicy(
            policy.ScrollBarAsNeeded if lines >= _MAX_LINES else policy.ScrollBarAlwaysOff
        )
