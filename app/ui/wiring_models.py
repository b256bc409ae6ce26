"""Wiring for the models page: the installed models (ModelsController), importing a .gguf
(the page's button or Ctrl+I) with its progress, deleting, and starting a chat with one."""

from __future__ import annotations

from .controllers.chat import ChatController
from .controllers.models import ModelsController
from .views.main_window import CHAT_PAGE, MODELS_PAGE, MainWindow

__all__ = ["wire_models_page"]


def wire_models_page(window: MainWindow, models: ModelsController, chat: ChatController) -> None:
    page, dialogs = window.models_page, window.dialogs

    def on_import_started(name: str) -> None:
        window.show_page(MODELS_PAGE)  # where the progress bar is
        page.show_import(page.tr("Importing %1…").replace("%1", name), 0, 0)

    def on_imported(name: str, ok: bool, _message: str) -> None:
        page.hide_import()
        if ok:
            page.select_name(name)

    def import_gguf() -> None:
        path = dialogs.pick_gguf()
        if path:
            models.import_gguf(path)

    def chat_with(name: str) -> None:
        if name:
            chat.new_chat(name)
            window.show_page(CHAT_PAGE)

    models.notice.connect(window.notify)
    models.import_started.connect(on_import_started)
    models.import_progress.connect(page.show_import)
    models.import_finished.connect(on_imported)
    page.refresh_requested.connect(models.refresh)
    page.import_requested.connect(import_gguf)
    page.delete_requested.connect(models.delete)
    page.chat_requested.connect(chat_with)
    window.act_import.triggered.connect(import_gguf)
