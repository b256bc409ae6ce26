"""Wiring for the sidebar: the chat list (HistoryController) with the open chat selected;
new chat, open, search, rename and delete."""

from __future__ import annotations

from .controllers.chat import ChatController
from .controllers.history import HistoryController
from .views.dialogs import Dialogs
from .views.sidebar import Sidebar

__all__ = ["wire_sidebar"]


def wire_sidebar(
    sidebar: Sidebar, history: HistoryController, chat: ChatController, dialogs: Dialogs
) -> None:
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

    chat.chat_opened.connect(on_opened)
    chat.chat_meta_changed.connect(on_meta)
    history.chat_deleted.connect(chat.on_chat_deleted)
    sidebar.new_chat.connect(lambda: chat.new_chat())
    sidebar.chat_selected.connect(chat.open_chat)
    sidebar.search_changed.connect(history.search)
    sidebar.rename_requested.connect(rename)
    sidebar.delete_requested.connect(delete)
