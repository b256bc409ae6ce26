"""The sidebar's chat list: newest first, full-text search, rename, delete, export, import."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from ...history import Chat, ChatStore
from ...history.export import import_file
from ...history.export_files import write_export
from ..item_models.chat_list import ChatListModel, ChatRow

__all__ = ["HistoryController"]


class HistoryController(QObject):
    chat_deleted = Signal(int)

    def __init__(self, store: ChatStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self.model = ChatListModel(self)
        self.query = ""

    def chat(self, chat_id: int) -> Chat | None:
        return self._store.chat(chat_id)

    def refresh(self) -> None:
        if self.query.strip():
            rows = [
                ChatRow(h.chat_id, h.title, h.updated_at, h.snippet)
                for h in self._store.search(self.query)
            ]
        else:
            rows = [ChatRow(c.id, c.title, c.updated_at) for c in self._store.chats()]
        self.model.set_rows(rows)

    def search(self, text: str) -> None:
        self.query = text
        self.refresh()

    def rename(self, chat_id: int, title: str) -> None:
        title = title.strip()
        if title:
            self._store.rename_chat(chat_id, title)
            self.refresh()

    def delete(self, chat_id: int) -> None:
        self._store.delete_chat(chat_id)
        self.refresh()
        self.chat_deleted.emit(chat_id)

    def export_to(self, path: Path, fmt: str, chat_ids: Sequence[int] | None = None) -> int:
        """Write the chats (default: all) to `path` as "json" or "markdown"; how many.
        Raises ExportError or OSError (sentences for the caller to show)."""
        return write_export(self._store, chat_ids, path, fmt)

    def import_from(self, path: Path) -> list[int]:
        """Add the chats of the JSON export at `path` (new ids, nothing overwritten) and list
        them; their ids. Raises ExportError or OSError, having added nothing."""
        ids = import_file(self._store, path)
        self.refresh()
        return ids
