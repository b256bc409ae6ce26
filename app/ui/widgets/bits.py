"""Small widgets: the context meter, the toast, the drop overlay, a row of thumbnails."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

__all__ = ["ContextMeter", "Toast", "DropOverlay", "thumbnail_row"]


def _short(n: int) -> str:
    return f"{n / 1000:.1f}k".replace(".0k", "k") if n >= 10000 else f"{n:,}"


class ContextMeter(QWidget):
    """How much of the context window the conversation fills."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(self.tr("Context usage"))
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        self.label = QLabel()
        self.label.setObjectName("Stats")
        self.label.setAlignment(Qt.AlignmentFlag.AlignRight)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(120)
        self.bar.setAccessibleName(self.tr("Context usage"))
        lay.addWidget(self.label)
        lay.addWidget(self.bar)
        # Not `window`: that would hide QWidget.window() (the event filter calls it).
        self.used = self.capacity = 0
        self.set_usage(0, 0)

    def set_usage(self, used: int, window: int) -> None:
        self.used, self.capacity = used, window
        self.bar.setRange(0, max(window, 1))
        self.bar.setValue(min(used, window))
        self.label.setText(
            self.tr("%1 / %2 tokens").replace("%1", _short(used)).replace("%2", _short(window))
            if window
            else ""
        )
        pct = 100 * used // window if window else 0
        text = (
            self.tr("Context: %1 of %2 tokens used (%3%)")
            .replace("%1", f"{used:,}")
            .replace("%2", f"{window:,}")
            .replace("%3", str(pct))
        )
        self.setToolTip(text)
        self.setAccessibleDescription(text)


class Toast(QFrame):
    """A message that appears over the window and fades by itself; it never blocks anything."""

    closed = Signal()

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("Toast")
        self.setAccessibleName(self.tr("Notification"))
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 8, 8, 8)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setMaximumWidth(520)
        close = QToolButton()
        close.setText("✕")
        close.setAccessibleName(self.tr("Dismiss notification"))
        close.setStyleSheet("color: inherit;")
        close.clicked.connect(self.hide)
        lay.addWidget(self.label, 1)
        lay.addWidget(close)
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self.hide)
        self.level = ""
        self.hide()

    def show_message(self, level: str, text: str) -> None:
        self.level = level
        self.setProperty("level", level)
        self.style().unpolish(self)
        self.style().polish(self)
        # The first sentence is the message; details (an engine's raw error) stay in the chat.
        self.label.setText(text.split("\n", 1)[0])
        self.setAccessibleDescription(text)
        self.adjustSize()
        self.reposition()
        self.show()
        self.raise_()
        self._timer.start(8000 if level == "error" else 3000)

    def reposition(self) -> None:
        # Bottom centre, just above the message box: seen, but not over the header's controls.
        parent = self.parentWidget()
        if parent is not None:
            self.adjustSize()
            self.move((parent.width() - self.width()) // 2, parent.height() - self.height() - 120)


class DropOverlay(QFrame):
    """Covers the window while something is dragged over it, saying what a drop will do."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("DropOverlay")
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        lay = QVBoxLayout(self)
        card = QFrame()
        card.setObjectName("DropCard")
        cl = QVBoxLayout(card)
        cl.setContentsMargins(40, 30, 40, 30)
        self.label = QLabel()
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setStyleSheet("font-size: 16px; font-weight: 600;")
        cl.addWidget(self.label)
        lay.addStretch(1)
        lay.addWidget(card, 0, Qt.AlignmentFlag.AlignCenter)
        lay.addStretch(1)
        self.hide()

    def show_hint(self, text: str) -> None:
        self.label.setText(text)
        parent = self.parentWidget()
        if parent is not None:
            self.setGeometry(parent.rect())
        self.show()
        self.raise_()


def thumbnail_row(images: list[bytes], size: int = 200) -> tuple[QWidget, list[QLabel]]:
    """A row of thumbnails of `images`: a user's pictures, a tool result's (pictures Qt
    cannot decode get an empty label)."""
    row = QWidget()
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(6)
    labels = []
    for n, data in enumerate(images):
        pix = QPixmap()
        pix.loadFromData(data)
        label = QLabel()
        label.setObjectName("Thumbnail")
        label.setAccessibleName(row.tr("Attached image %1").replace("%1", str(n + 1)))
        if not pix.isNull():
            label.setPixmap(
                pix.scaled(
                    size,
                    size,
                    Qt.AspectRatioMode.KeepAspectRatio,
                    Qt.TransformationMode.SmoothTransformation,
                )
            )
            label.setToolTip(f"{pix.width()} × {pix.height()}")
        lay.addWidget(label)
        labels.append(label)
    lay.addStretch(1)
    return row, labels
