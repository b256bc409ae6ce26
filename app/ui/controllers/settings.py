"""Settings changes: saved at once; theme applied at once; service settings restart it."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication

from ...app_settings import (
    THEMES,
    AppSettings,
    load_tool_grants,
    new_api_key,
    save_settings,
    save_tool_grants,
    settings_path,
)
from ..service_manager import ServiceManager
from ..theme import Palette, apply_theme

__all__ = ["SettingsController"]


class SettingsController(QObject):
    changed = Signal()
    theme_changed = Signal(object)  # Palette

    def __init__(
        self, settings: AppSettings, service: ServiceManager, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.settings = settings
        self._service = service
        self.palette: Palette | None = None
        # Several switches flipped in a row restart the service once.
        self._restart = QTimer(self, singleShot=True, interval=400)
        self._restart.timeout.connect(self._service.restart)

    def current(self) -> AppSettings:
        return self.settings

    def _save(self, restart: bool = False) -> None:
        # The grants are written where they change (`save_tool_grants`, by the app or the
        # CLI): the file's are kept, not this copy's.
        if settings_path().exists():
            self.settings.tool_grants = load_tool_grants()
        save_settings(self.settings)
        self.changed.emit()
        if restart:
            self._restart.start()

    def set_work_offline(self, on: bool) -> None:
        """Offline: the app refuses downloads and searches, and its own service is restarted
        with HEARTH_OFFLINE so no client of the API can pull either."""
        if on != self.settings.work_offline:
            self.settings.work_offline = on
            self._save(restart=True)

    def mark_models_offered(self) -> None:
        """The first-run offer of a chat model was made: it is not made again."""
        self.settings.offered_models = True
        self._save()

    def apply_theme(self) -> Palette:
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        self.palette = apply_theme(app, self.settings.theme)
        self.theme_changed.emit(self.palette)
        return self.palette

    def set_theme(self, theme: str) -> None:
        if theme in THEMES and theme != self.settings.theme:
            self.settings.theme = theme
            self._save()
            self.apply_theme()

    # -- Local API ---------------------------------------------------------------------------

    def set_api_enabled(self, on: bool) -> None:
        if on != self.settings.api_enabled:
            self.settings.api_enabled = on
            self._save(restart=True)

    def set_api_port(self, port: int) -> None:
        if 1 <= port <= 65535 and port != self.settings.api_port:
            self.settings.api_port = port
            self._save(restart=self.settings.api_enabled)

    def set_api_expose(self, on: bool) -> None:
        if on != self.settings.api_expose:
            self.settings.api_expose = on
            if on and not self.settings.api_key:
                self.settings.api_key = new_api_key()
            self._save(restart=self.settings.api_enabled)

    def regenerate_api_key(self) -> str:
        self.settings.api_key = new_api_key()
        self._save(restart=self.settings.api_enabled and self.settings.api_expose)
        return self.settings.api_key

    # -- engine ------------------------------------------------------------------------------

    def set_num_ctx(self, n: int) -> None:
        if n != self.settings.num_ctx:
            self.settings.num_ctx = n
            self._save()

    def set_num_gpu(self, n: int) -> None:
        if n != self.settings.num_gpu:
            self.settings.num_gpu = n
            self._save()

    def set_num_thread(self, n: int) -> None:
        if n != self.settings.num_thread:
            self.settings.num_thread = n
            self._save()

    def set_models_dir(self, path: str) -> None:
        if path != self.settings.models_dir:
            self.settings.models_dir = path
            self._save(restart=True)

    def set_think(self, on: bool) -> None:
        if on != self.settings.think:
            self.settings.think = on
            self._save()

    # -- tools -------------------------------------------------------------------------------

    def set_tool_max_steps(self, n: int) -> None:
        if 1 <= n <= 100 and n != self.settings.tool_max_steps:
            self.settings.tool_max_steps = n
            self._save()

    def set_tool_call_timeout(self, seconds: int) -> None:
        if 1 <= seconds <= 3600 and seconds != self.settings.tool_call_timeout:
            self.settings.tool_call_timeout = seconds
            self._save()

    def set_tool_grants(self, grants: list[dict[str, str]]) -> None:
        """The "always allow" grants (`hearth.agent.approvals`, which owns their meaning)."""
        if grants != self.settings.tool_grants:
            self.settings.tool_grants = [dict(g) for g in grants]
            save_tool_grants(self.settings.tool_grants)
            self._save()
