"""The composition root: builds the app's parts, connects them, and runs the window.

`main(argv)` is what `hearth` (no arguments) runs. Everything is owned by one HearthApp per
window; nothing lives at module level.

The parts, from the bottom up:
* the service (service_manager.py) and the HTTP client (api_client.py);
* controllers/: what the app does (the open chat, the models, the chat list, the settings,
  drops), as QObjects with signals; they know nothing of widgets;
* views/ and widgets/: the window and its pages; they only show things and emit signals;
* wiring_*.py: one function per page that connects its views to its controllers.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from PySide6.QtCore import QByteArray, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QMessageBox

from .. import env
from ..app_settings import AppSettings, load_settings, save_settings
from ..desktop import ASSETS
from ..history import ChatStore
from ..history.migrations import SchemaError
from ..program import APP_ID
from .api_client import ApiClient
from .controllers.chat import ChatController
from .controllers.downloads import DownloadsController
from .controllers.drops import DropController
from .controllers.history import HistoryController
from .controllers.mcp import McpController
from .controllers.models import ModelsController
from .controllers.settings import SettingsController
from .controllers.tools import ToolsController
from .service_manager import ServiceManager
from .views.main_window import MainWindow
from .wiring_chat import wire_chat_page
from .wiring_compare import wire_compare
from .wiring_downloads import wire_get_models
from .wiring_mcp import wire_mcp
from .wiring_models import wire_models_page
from .wiring_service import wire_service
from .wiring_settings import wire_settings_page
from .wiring_sidebar import wire_sidebar
from .wiring_tools import wire_tools

__all__ = ["main", "HearthApp", "parse_args"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="hearth", description="Hearth: local LLMs, in a window.")
    p.add_argument(
        "--server",
        default=env.text("HEARTH_SERVER"),
        help="use the `hearth serve` (or Ollama-compatible service) at this URL instead of "
        "starting one",
    )
    p.add_argument("--api-key", default="", help="bearer token for --server")
    p.add_argument(
        "--smoke-test",
        action="store_true",
        help="exit (status 0) as soon as the window is shown: installers' checks",
    )
    return p.parse_args(list(argv or []))


class HearthApp:
    """One window and everything behind it. Tests build this directly."""

    def __init__(self, argv: Sequence[str] | None = None, settings: AppSettings | None = None):
        args = parse_args(argv)
        token = args.api_key or (env.text("HEARTH_API_KEY") if args.server else "")
        self.settings = settings or load_settings()
        self.store = ChatStore()
        self.client = ApiClient()
        self.service = ServiceManager(lambda: self.settings, args.server, token)
        self.settings_ctrl = SettingsController(self.settings, self.service)
        palette = self.settings_ctrl.apply_theme()
        self.models = ModelsController(self.client)
        self.downloads = DownloadsController(
            self.client, lambda: self.settings.work_offline, self.models
        )
        self.history = HistoryController(self.store)
        # The tool servers (MCP) live as long as the app: started on demand, stopped at exit.
        self.tools = ToolsController(self.settings_ctrl)
        self.chat = ChatController(
            self.store, self.client, self.models, lambda: self.settings, self.tools
        )
        self.mcp = McpController(self.tools, self.chat)  # prompts, resources, questions
        self.drops = DropController(self.chat, self.models)
        self.window = MainWindow(
            self.history.model, self.chat.conversation, self.models.model, self.drops, palette
        )
        self._wire()
        self._closed = False
        if self.settings.window_geometry:
            self.window.restoreGeometry(
                QByteArray.fromBase64(self.settings.window_geometry.encode())
            )
        self._open_first_chat()

    def _wire(self) -> None:
        w = self.window
        wire_service(self.service, self.client, self.models, w.sidebar, w.chat_page, w.dialogs)
        wire_chat_page(w, self.chat, self.models, self.settings_ctrl, self.drops)
        wire_compare(w, self.chat, self.models)
        wire_sidebar(w.sidebar, self.history, self.chat, w.dialogs, w.notify)
        wire_models_page(w, self.models, self.chat)
        wire_get_models(w, self.models, self.downloads, self.settings_ctrl)
        wire_settings_page(
            w.settings_page,
            self.settings_ctrl,
            self.service,
            w.chat_page.transcript,
            w.dialogs,
            w.notify,
        )
        wire_tools(w, self.tools, self.chat, self.models, self.settings_ctrl)
        wire_mcp(w, self.mcp, self.chat)

    def _open_first_chat(self) -> None:
        self.history.refresh()
        chats = self.store.chats()
        if chats:
            self.chat.open_chat(chats[0].id)
        else:
            self.chat.new_chat()  # first run: the last-picked model, else the default
        if self.store.recovered:
            n = self.store.recovered
            self.window.notify(
                "info",
                self.window.tr(
                    "%1 reply was cut off when Hearth last closed; what it had written is "
                    "kept and marked interrupted."
                    if n == 1
                    else "%1 replies were cut off when Hearth last closed; what they had written "
                    "is kept and marked interrupted."
                ).replace("%1", str(n)),
            )

    def start(self) -> None:
        """Show the window at once; the engine starts behind it."""
        app = QApplication.instance()
        if app is not None:
            app.installEventFilter(self.window)
        self.window.show()
        self.service.start()

    def shutdown(self) -> None:
        """Stop the engine child and close the history; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.models.stop_watching()
        # Replies still in flight must not reach controllers whose database is closed.
        ctrls = (self.models, self.chat, self.history, self.service, self.settings_ctrl, self.tools)
        for ctrl in ctrls:
            ctrl.blockSignals(True)
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self.window)
        self.settings.window_geometry = bytes(self.window.saveGeometry().toBase64().data()).decode()
        save_settings(self.settings)
        self.chat.shutdown()
        self.mcp.close()
        self.tools.close()
        self.service.stop()
        self.store.close()


def main(argv: Sequence[str] | None = None) -> int:
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "hearth"])
    assert isinstance(app, QApplication)
    app.setApplicationName("Hearth")
    app.setApplicationDisplayName("Hearth")
    # The .desktop file's id: Wayland compositors find the window's icon and name through it.
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(QIcon(str(ASSETS / f"{APP_ID}.png")))
    try:
        hearth = HearthApp(argv)
    except SchemaError as e:  # chats from a newer Hearth, or an upgrade that failed: say so
        print(f"hearth: {e}", file=sys.stderr, flush=True)
        if not parse_args(argv).smoke_test:
            QMessageBox.critical(None, app.tr("Hearth cannot open your chats"), str(e))
        return 1
    # SIGTERM/SIGINT end the event loop normally, so the service child is stopped too; the
    # timer gives Python a moment to run its signal handlers while Qt waits.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    tick = QTimer(interval=300)
    tick.timeout.connect(lambda: None)
    tick.start()
    app.aboutToQuit.connect(hearth.shutdown)
    hearth.start()
    if parse_args(argv).smoke_test:
        QTimer.singleShot(0, lambda: _end_smoke_test(app, hearth))
    return int(app.exec())


def _end_smoke_test(app: QApplication, hearth: HearthApp) -> None:
    """--smoke-test: say whether the window is on screen (and the desktop id it gives the
    window system), and quit (status 0 when it is)."""
    shown = hearth.window.isVisible()
    said = "the window is shown" if shown else "the window did not show"
    print(f"Hearth: {said} (desktop file {app.desktopFileName()})", flush=True)
    app.exit(0 if shown else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
