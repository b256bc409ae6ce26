"""Wiring for Compare (controllers/compare.py): the header's Compare button and Ctrl+Shift+M
turn it on with a second model (the compare bar over the message box changes it), and a
comparison's "Continue with this reply" goes on with that reply."""

from __future__ import annotations

from .controllers.chat import ChatController
from .controllers.models import ModelsController
from .views.main_window import MainWindow

__all__ = ["wire_compare"]


def wire_compare(window: MainWindow, chat: ChatController, models: ModelsController) -> None:
    page = window.chat_page
    bar, compare = page.compare_bar, chat.compare

    def second_model() -> str:
        """An installed chat model other than the open chat's ('' when there is none)."""
        for name in models.names():
            info = models.info(name)
            if name != chat.model and (info is None or info.chat):
                return name
        return ""

    def toggle() -> None:
        if compare.other:
            compare.set_other("")
            return
        other = second_model()
        if not other:
            page.compare_btn.setChecked(False)
            window.notify(
                "info",
                page.tr("Compare needs a second model: get one on the Models page (Ctrl+2)."),
            )
            return
        compare.set_other(other)

    def show(other: str) -> None:
        bar.show_compare(chat.model, other)
        page.compare_btn.setChecked(bool(other))

    def pick(name: str) -> None:
        if name == chat.model:
            window.notify("info", page.tr("Pick a model other than the chat's own to compare."))
            bar.show_compare(chat.model, compare.other)
        else:
            compare.set_other(name)

    compare.other_changed.connect(show)
    compare.finished.connect(lambda *_a: models.refresh_running())  # where each model runs
    chat.chat_meta_changed.connect(lambda: show(compare.other))  # the chat's model may change
    bar.model_chosen.connect(pick)
    bar.close_requested.connect(lambda: compare.set_other(""))
    page.compare_btn.clicked.connect(toggle)
    window.act_compare.triggered.connect(toggle)
    page.transcript.continue_requested.connect(chat.continue_with)
