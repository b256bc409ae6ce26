"""Wiring for the settings page: every control to SettingsController, and the page kept up
to date with the settings and the Local API's state (which follows the service)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices

from .controllers.clipboard import copy_text
from .controllers.settings import SettingsController
from .service_manager import ServiceManager
from .views.dialogs import Dialogs
from .views.settings_page import SettingsPage
from .widgets.transcript import Transcript

__all__ = ["wire_settings_page"]


def wire_settings_page(
    page: SettingsPage,
    settings: SettingsController,
    service: ServiceManager,
    transcript: Transcript,
    dialogs: Dialogs,
    notify: Callable[[str, str], None],
) -> None:
    def show() -> None:
        s, ep = settings.current(), service.endpoint
        page.show_settings(s, page.api_status_text(s, ep.port if ep else None))

    def copy_key() -> None:
        copy_text(settings.current().api_key)
        notify("info", page.tr("API key copied"))

    def browse_models_dir() -> None:
        folder = dialogs.pick_models_dir(settings.current().models_dir)
        if folder:
            settings.set_models_dir(folder)

    def open_logs() -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(service.log_path.parent)))

    settings.changed.connect(show)
    service.state_changed.connect(lambda _state, _text: show())
    settings.theme_changed.connect(transcript.set_palette)  # the messages draw their own colours
    page.api_toggled.connect(settings.set_api_enabled)
    page.port_changed.connect(settings.set_api_port)
    page.expose_toggled.connect(settings.set_api_expose)
    page.new_key_requested.connect(settings.regenerate_api_key)
    page.copy_key_requested.connect(copy_key)
    page.num_ctx_changed.connect(settings.set_num_ctx)
    page.num_gpu_changed.connect(settings.set_num_gpu)
    page.num_thread_changed.connect(settings.set_num_thread)
    page.theme_changed.connect(settings.set_theme)
    page.models_dir_changed.connect(settings.set_models_dir)
    page.browse_models_dir.connect(browse_models_dir)
    page.open_logs.connect(open_logs)
    page.show_shortcuts.connect(dialogs.show_shortcuts)
    show()
