"""Wiring for "Get models": the models page's button opens the window (created on first
use), DownloadsController's progress feeds its rows, a finished download refreshes the model
list, the offline switch is a saved setting, and the first-run offer of a chat model is
shown once (the setting remembers it was made) and goes as soon as a chat model is installed
(however it came: the offer, Get models, `hearth pull` or `hearth create`)."""

from __future__ import annotations

from PySide6.QtWidgets import QBoxLayout

from .catalog import FIRST_RUN_CHOICE
from .controllers.downloads import DownloadsController
from .controllers.models import ModelsController
from .controllers.settings import SettingsController
from .views.get_models import FirstModelOffer, GetModelsDialog
from .views.main_window import MainWindow

__all__ = ["wire_get_models"]


def wire_get_models(
    window: MainWindow,
    models: ModelsController,
    downloads: DownloadsController,
    settings: SettingsController,
) -> None:
    dialog: list[GetModelsDialog] = []

    def get_dialog() -> GetModelsDialog:
        if not dialog:
            d = GetModelsDialog(settings.settings.work_offline, window)
            d.pull_requested.connect(downloads.pull)
            d.cancel_requested.connect(downloads.cancel)
            d.search_requested.connect(downloads.search)
            d.offline_toggled.connect(settings.set_work_offline)
            downloads.search_results.connect(d.show_results)
            downloads.started.connect(d.download_started)
            downloads.progress.connect(d.download_progress)
            downloads.finished.connect(d.download_finished)
            dialog.append(d)
        return dialog[0]

    def open_dialog() -> None:
        d = get_dialog()
        d.show()
        d.raise_()

    def on_finished(_name: str, ok: bool, _message: str) -> None:
        if ok:
            models.refresh()

    offers: list[FirstModelOffer] = []

    def has_chat_model() -> bool:
        """A model other than the bundled base model (which cannot follow instructions)."""
        return any(n != settings.settings.default_model for n in models.names())

    def on_models_changed() -> None:
        if offers and has_chat_model():
            offers[0].hide()  # the user has a chat model now: nothing left to offer
        else:
            offer_once()

    def offer_once() -> None:
        if settings.settings.offered_models or not models.loaded:
            return
        settings.mark_models_offered()
        if has_chat_model():
            return  # a real model is here already
        offer = FirstModelOffer(window.chat_page)
        offers.append(offer)
        layout = window.chat_page.layout()
        if isinstance(layout, QBoxLayout):
            layout.insertWidget(0, offer)

        def download() -> None:
            open_dialog()  # its rows show the progress
            downloads.pull(FIRST_RUN_CHOICE.name)

        offer.download.connect(download)
        offer.choose.connect(open_dialog)
        offer.show()
        window.first_model_offer = offer  # type: ignore[attr-defined]  # for tests

    downloads.notice.connect(window.notify)
    downloads.finished.connect(on_finished)
    window.models_page.get_models_requested.connect(open_dialog)
    models.models_changed.connect(on_models_changed)
    window.get_models_dialog = get_dialog  # type: ignore[attr-defined]  # for tests
