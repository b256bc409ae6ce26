"""An on/off switch: a checkable button painted as a track and knob (keyboard: Space)."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QAbstractButton, QWidget

__all__ = ["ToggleSwitch"]


class ToggleSwitch(QAbstractButton):
    def __init__(self, accessible_name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setCheckable(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setAccessibleName(accessible_name)
        self.toggled.connect(self.update)

    def sizeHint(self) -> QSize:
        return QSize(40, 22)

    def paintEvent(self, _e: QPaintEvent) -> None:
        pal = self.palette()
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(1, 1, 38, 20)
        on = self.isChecked()
        track = pal.highlight().color() if on else pal.mid().color()
        if not self.isEnabled():
            track.setAlpha(110)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(track)
        p.drawRoundedRect(r, 10, 10)
        if self.hasFocus():
            p.setPen(pal.highlight().color())
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRoundedRect(r.adjusted(-1, -1, 1, 1), 11, 11)
            p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#FFFFFF"))
        x = r.right() - 18 if on else r.left() + 2
        p.drawEllipse(QRectF(x, r.top() + 2, 16, 16))
