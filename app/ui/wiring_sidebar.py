"""Wiring for the sidebar: the chat list (HistoryController) with the open chat selected;
new chat, open, search, rename, delete, export (one chat or all) and import."""

from __future__ import annotations

from collections.abc import Callable

from ..history.export import ExportError
from ..history.export_files import suggested_name
from .controllers.chat import ChatController
from .controllers.history import HistoryController
from .views.dialogs import Dialogs
from .views.sidebar import Sidebar

__all__ = ["wire_sidebar"]


def wire_sidebar(
    sidebar: Sidebar,
    history: HistoryController,
    chat: ChatController,
    dialogs: Dialogs,
    notify: Callable[[str, str], None] = lambda level, text: None,
) -> None:
    """`notify(level, text)` shows the outcome of an export or import (a toast)."""

    def on_opened(chat_id: int) -> None:
        history.refresh()
        sidebar.select_chat(chat_id)  # 0 (no chat open): nothing selected

    def on_meta() -> None:
        """A title or the order changed: list the chats again, keeping the open one selected."""
        history.refresh()
        if chat.chat is not None:
            sidebar.select_chat(chat.chat.id)

    def rename(chat_id: int) -> None:
        renamed = history.chat(chat_id)
        if renamed is None:
            return
        title = dialogs.ask_chat_title(renamed.title)
        if title is not None:
            history.rename(chat_id, title)
            if chat.chat and chat.chat.id == chat_id:
                chat.open_chat(chat_id)

    def delete(chat_id: int) -> None:
        doomed = history.chat(chat_id)
        if doomed is not None and dialogs.confirm_delete_chat(doomed.title):
            history.delete(chat_id)

    def export(chat_id: int | None) -> None:
        """Export one chat (or, for None, all) to a file the user picks."""
        one = history.chat(chat_id) if chat_id is not None else None
        if chat_id is not None and one is None:
            return
        picked = dialogs.pick_export_file(suggested_name(one.title if one else None))
        if picked is None:
            return
        path, fmt = picked
        try:
            n = history.export_to(path, fmt, None if chat_id is None else [chat_id])
        except (ExportError, OSError) as e:
            text = sidebar.tr("Nothing was exported to %1: %2").replace("%2", _reason(e))
            notify("error", text.replace("%1", str(path)))
            return
        if n == 1:
            text = sidebar.tr("Exported 1 chat to %1")
        else:
            text = sidebar.tr("Exported %2 chats to %1").replace("%2", str(n))
        notify("info", text.replace("%1", str(path)))

    def import_chats() -> None:
        path = dialogs.pick_chats_import()
        if path is None:
            return
        try:
            ids = history.import_from(path)
        except (ExportError, OSError) as e:
            notify("error", sidebar.tr("Nothing was imported: %1").replace("%1", _reason(e)))
            return
        if ids:
            chat.open_chat(ids[0])
        if len(ids) == 1:
            text = sidebar.tr("Imported 1 chat from %1")
        else:
            text = sidebar.tr("Imported %2 chats from %1").replace("%2", str(len(ids)))
        notify("info", text.replace("%1", path.name))

    chat.chat_opened.connect(on_opened)
    chat.chat_meta_changed.connect(on_meta)
    history.chat_deleted.connect(chat.on_chat_deleted)
    sidebar.new_chat.connect(lambda: chat.new_chat())
    sidebar.chat_selected.connect(chat.open_chat)
    sidebar.search_changed.connect(history.search)
    sidebar.rename_requested.connect(rename)
    sidebar.delete_requested.connect(delete)
    sidebar.export_requested.connect(export)
    sidebar.export_all_requested.connect(lambda: export(None))
    sidebar.import_requested.connect(import_chats)


def _reason(e: ExportError | OSError) -> str:
    """The sentence for a failed export or import: ExportError's own, or the system's."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e)
