"""Paints a chat in the sidebar: title and time, and the matching words under a search."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from ..item_models.chat_list import ChatListModel

__all__ = ["ChatDelegate"]


class ChatDelegate(QStyledItemDelegate):
    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        fm = QFontMetrics(option.font)
        lines = 2 if index.data(ChatListModel.SnippetRole) else 1
        return QSize(200, fm.height() * lines + 16 + (4 if lines == 2 else 0))

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        pal = option.palette
        rect: QRect = option.rect
        state = option.state
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        selected = bool(state & QStyle.StateFlag.State_Selected)
        hovered = bool(state & QStyle.StateFlag.State_MouseOver)
        if selected or hovered:
            bg = QColor(pal.highlight().color())
            bg.setAlpha(46 if selected else 20)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(bg)
            painter.drawRoundedRect(rect.adjusted(6, 1, -6, -1), 8, 8)
        if state & QStyle.StateFlag.State_HasFocus:
            painter.setPen(pal.highlight().color())
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(rect.adjusted(6, 1, -6, -1), 8, 8)
        font = option.font
        fm = QFontMetrics(font)
        inner = rect.adjusted(16, 8, -14, -8)
        age = str(index.data(ChatListModel.AgeRole) or "")
        age_w = fm.horizontalAdvance(age) + 8
        f = QFont(font)
        f.setWeight(QFont.Weight.DemiBold if selected else QFont.Weight.Normal)
        title = QFontMetrics(f).elidedText(  # measured in the font it is drawn in
            str(index.data(Qt.ItemDataRole.DisplayRole) or ""),
            Qt.TextElideMode.ElideRight,
            inner.width() - age_w,
        )
        painter.setFont(f)
        painter.setPen(pal.text().color())
        painter.drawText(
            QRect(inner.left(), inner.top(), inner.width() - age_w, fm.height()),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            title,
        )
        painter.setFont(font)
        muted = QColor(pal.placeholderText().color())
        painter.setPen(muted)
        painter.drawText(
            QRect(inner.right() - age_w, inner.top(), age_w, fm.height()),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            age,
        )
        snippet = str(index.data(ChatListModel.SnippetRole) or "")
        if snippet:
            text = fm.elidedText(snippet, Qt.TextElideMode.ElideRight, inner.width())
            painter.drawText(
                QRect(inner.left(), inner.top() + fm.height() + 4, inner.width(), fm.height()),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                text,
            )
        painter.restore()
