"""Wiring for the engine's state: the sidebar's status line, the chat page's banner and the
composer's readiness; once the service is up, the API client's address and the models list;
the watch that keeps that list current while the window is seen; when it cannot start, the
failure dialog (Retry restarts it)."""

from __future__ import annotations

from .api_client import ApiClient
from .controllers.models import ModelsController
from .service_manager import READY, STARTING, ServiceManager
from .views.chat_page import ChatPage
from .views.dialogs import Dialogs
from .views.sidebar import Sidebar

__all__ = ["wire_service"]


def wire_service(
    service: ServiceManager,
    client: ApiClient,
    models: ModelsController,
    sidebar: Sidebar,
    page: ChatPage,
    dialogs: Dialogs,
) -> None:
    window = sidebar.window()

    def on_state(state: str, text: str) -> None:
        sidebar.set_status(text, state == READY)
        page.composer.set_ready(state == READY)
        if state == STARTING:
            page.set_banner(text, True)
        elif state == READY:
            page.set_banner("", False)

    def on_ready(url: str, token: str) -> None:
        client.set_endpoint(url, token)
        models.refresh()
        models.watch(lambda: window.isVisible() and not window.isMinimized())
        dialogs.close_service_failed()

    def on_failed(reason: str, log_path: str) -> None:
        page.set_banner(reason.split("\n\n", 1)[0], False)
        dialogs.show_service_failed(reason, log_path, retry=service.restart)

    service.state_changed.connect(on_state)
    service.ready.connect(on_ready)
    service.failed.connect(on_failed)
    page.composer.set_ready(False)
    page.set_banner(page.tr("Starting the engine…"), True)
