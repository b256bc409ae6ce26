"""A QTextBrowser that grows to fit its text (the transcript scrolls, not each message)."""

from __future__ import annotations

import math

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QResizeEvent, QWheelEvent
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget

from ..markdown import render_markdown
from ..theme import Palette

__all__ = ["MarkdownView"]


class MarkdownView(QTextBrowser):
    code_copied = Signal(int)

    def __init__(self, accessible_name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(accessible_name)
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextBrowserInteraction
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.viewport().setAutoFillBackground(False)
        self.setStyleSheet("QTextBrowser { background: transparent; border: none; padding: 0; }")
        self.document().setDocumentMargin(0)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.anchorClicked.connect(self._on_anchor)
        self.code_blocks: list[str] = []
        self._source = ""

    def set_markdown(self, text: str, palette: Palette) -> None:
        rendered = render_markdown(text, palette, self.tr("Copy"))
        self.code_blocks = rendered.code_blocks
        self._source = text
        self.setHtml(rendered.html)
        self._fit()

    def markdown_source(self) -> str:
        return self._source

    def _fit(self) -> None:
        self.document().setTextWidth(self.viewport().width())
        height = math.ceil(self.document().size().height()) + 2
        if height != self.height():
            self.setFixedHeight(height)

    def sizeHint(self) -> QSize:
        return QSize(400, self.height())

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        if e.size().width() != e.oldSize().width():
            self._fit()

    def wheelEvent(self, e: QWheelEvent) -> None:
        e.ignore()  # let the transcript scroll

    def copy_code(self, number: int) -> None:
        if 0 <= number < len(self.code_blocks):
            QGuiApplication.clipboard().setText(self.code_blocks[number])
            self.code_copied.emit(number)

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            self.copy_code(int(url.path() or -1))
        elif url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)
