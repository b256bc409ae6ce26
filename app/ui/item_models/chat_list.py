"""The sidebar's chats: newest first, or the hits of a search with a snippet each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

__all__ = ["ChatListModel", "ChatRow"]

_Index = QModelIndex | QPersistentModelIndex


@dataclass
class ChatRow:
    chat_id: int
    title: str
    updated_at: float
    snippet: str = ""


def _age(ts: float, now: float) -> str:
    days = int((now - ts) // 86400)
    if days <= 0:
        return time.strftime("%H:%M", time.localtime(ts))
    if days < 7:
        return time.strftime("%a", time.localtime(ts))
    return time.strftime("%d %b", time.localtime(ts))


class ChatListModel(QAbstractListModel):
    ChatIdRole = Qt.ItemDataRole.UserRole + 1
    SnippetRole = Qt.ItemDataRole.UserRole + 2
    AgeRole = Qt.ItemDataRole.UserRole + 3

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._rows: list[ChatRow] = []

    def set_rows(self, rows: list[ChatRow]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def row_of(self, chat_id: int) -> int:
        return next((i for i, r in enumerate(self._rows) if r.chat_id == chat_id), -1)

    def chat_id(self, row: int) -> int | None:
        return self._rows[row].chat_id if 0 <= row < len(self._rows) else None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return row.title or self.tr("New chat")
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.title
        if role == Qt.ItemDataRole.AccessibleTextRole:
            extra = f" — {row.snippet}" if row.snippet else ""
            return (row.title or self.tr("New chat")) + extra
        if role == self.ChatIdRole:
            return row.chat_id
        if role == self.SnippetRole:
            return row.snippet
        if role == self.AgeRole:
            return _age(row.updated_at, time.time())
        return None
