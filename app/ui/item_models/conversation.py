"""The conversation on screen (the current branch), one row per message.

The transcript view mirrors this model into message widgets; the chat controller is the only
writer. Streaming updates a row in place (dataChanged), so the view re-renders just that one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from ...history.records import Message

__all__ = ["ConversationModel", "MessageItem"]

_Index = QModelIndex | QPersistentModelIndex


@dataclass
class MessageItem:
    id: int
    role: str
    content: str = ""
    thinking: str = ""
    model: str = ""
    state: str = "done"
    error: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    images: list[bytes] = field(default_factory=list)
    version: int = 1
    versions: int = 1
    thinking_seconds: float = 0.0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # an assistant's calls
    tool: dict[str, Any] = field(default_factory=dict)  # a role "tool" message's call record
    documents: list[Any] = field(default_factory=list)  # a question's document chips
    sources: list[Any] = field(default_factory=list)  # the passages a reply draws on
    covers: int = 0  # a summary's: the earlier messages it stands for (history.compaction)
    compare: int = 0  # a compared reply's column (1, 2); Compare: controllers/compare.py
    compared: list[Any] = field(default_factory=list)  # its comparison's replies (MessageItem)

    @classmethod
    def from_message(cls, m: Message) -> MessageItem:
        return cls(
            id=m.id,
            role=m.role,
            content=m.content,
            thinking=m.thinking,
            model=m.model,
            state=m.state,
            error=m.error,
            stats=dict(m.stats),
            images=list(m.images),
            version=m.version,
            versions=m.versions,
            thinking_seconds=float(m.stats.get("thinking_seconds", 0.0)),
            tool_calls=[dict(c) for c in m.tool_calls],
            tool=dict(m.tool),
            covers=m.covers,
            compare=m.compare,
        )


class ConversationModel(QAbstractListModel):
    ItemRole = Qt.ItemDataRole.UserRole + 1

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._items: list[MessageItem] = []
        # What a message shows besides its own fields (documents, sources): MessageItem
        # field values by name, from the chat controller.
        self.extras: Callable[[Message], dict[str, Any]] = lambda _m: {}

    def _item(self, m: Message) -> MessageItem:
        return replace(MessageItem.from_message(m), **self.extras(m))

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._items)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._items):
            return None
        item = self._items[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return item.content
        if role == self.ItemRole:
            return item
        return None

    def items(self) -> list[MessageItem]:
        return [replace(i) for i in self._items]

    def item(self, row: int) -> MessageItem:
        return self._items[row]

    def row_of(self, message_id: int) -> int:
        return next((i for i, m in enumerate(self._items) if m.id == message_id), -1)

    def set_messages(self, messages: list[Message]) -> None:
        self.beginResetModel()
        self._items = [self._item(m) for m in messages]
        self.endResetModel()

    def sync(self, messages: list[Message]) -> None:
        """Show `messages`, touching only what differs: rows past the shared prefix are
        replaced, so sending or switching a version does not rebuild the whole transcript."""
        new = [self._item(m) for m in messages]
        keep = 0
        while keep < min(len(new), len(self._items)) and new[keep].id == self._items[keep].id:
            keep += 1
        if keep < len(self._items):
            self.beginRemoveRows(QModelIndex(), keep, len(self._items) - 1)
            del self._items[keep:]
            self.endRemoveRows()
        for row in range(keep):
            if new[row] != self._items[row]:
                self._items[row] = new[row]
                idx = self.index(row)
                self.dataChanged.emit(idx, idx, [self.ItemRole])
        if keep < len(new):
            self.beginInsertRows(QModelIndex(), keep, len(new) - 1)
            self._items.extend(new[keep:])
            self.endInsertRows()

    def append(self, item: MessageItem) -> None:
        n = len(self._items)
        self.beginInsertRows(QModelIndex(), n, n)
        self._items.append(item)
        self.endInsertRows()

    def update(self, message_id: int, **changes: Any) -> None:
        row = self.row_of(message_id)
        if row < 0:
            return
        item = self._items[row]
        for key, value in changes.items():
            setattr(item, key, value)
        idx = self.index(row)
        self.dataChanged.emit(idx, idx, [self.ItemRole])
