"""Connects views to controllers: every user action → a controller call, every controller
signal → what the views show. The small dialogs that ask the user something start here too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from .service_manager import READY, STARTING
from .theme import Palette
from .views.dialogs import ChatSettingsDialog, ShortcutsDialog, service_failed_box
from .views.main_window import CHAT_PAGE, MODELS_PAGE

if TYPE_CHECKING:
    from .app import HearthApp

__all__ = ["Wiring"]

_IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.gif *.bmp)"


class Wiring:
    def __init__(self, h: HearthApp) -> None:
        self.h = h
        self.w = h.window
        self.failure_box: QMessageBox | None = None
        self._service()
        self._chat()
        self._sidebar()
        self._models()
        self._settings()
        self._actions()
        self.show_settings()

    # -- engine --------------------------------------------------------------------------------

    def _service(self) -> None:
        h, page = self.h, self.w.chat_page
        h.service.state_changed.connect(self._on_service_state)
        h.service.ready.connect(self._on_service_ready)
        h.service.failed.connect(self._on_service_failed)
        page.composer.set_ready(False)
        page.set_banner(page.tr("Starting the engine…"), True)

    def _on_service_state(self, state: str, text: str) -> None:
        page = self.w.chat_page
        self.w.sidebar.set_status(text, state == READY)
        page.composer.set_ready(state == READY)
        if state == STARTING:
            page.set_banner(text, True)
        elif state == READY:
            page.set_banner("", False)
        self.show_settings()

    def _on_service_ready(self, url: str, token: str) -> None:
        self.h.client.set_endpoint(url, token)
        self.h.models.refresh()
        if self.failure_box is not None:
            self.failure_box.close()
            self.failure_box = None

    def _on_service_failed(self, reason: str, log_path: str) -> None:
        page = self.w.chat_page
        page.set_banner(reason.split("\n\n", 1)[0], False)
        box = service_failed_box(self.w, reason, log_path)
        box.finished.connect(self._on_failure_answer)
        self.failure_box = box
        box.open()

    def _on_failure_answer(self, result: int) -> None:
        self.failure_box = None
        if result == QMessageBox.StandardButton.Retry:
            self.h.service.restart()

    # -- chat ----------------------------------------------------------------------------------

    def _chat(self) -> None:
        h, page = self.h, self.w.chat_page
        chat, comp, tr = h.chat, page.composer, page.transcript
        chat.notice.connect(self.w.notify)
        chat.chat_opened.connect(self._on_chat_opened)
        chat.chat_meta_changed.connect(self._on_chat_meta)
        chat.busy_changed.connect(comp.set_busy)
        chat.busy_changed.connect(tr.set_busy)
        chat.context_changed.connect(page.meter.set_usage)
        chat.attachments_changed.connect(lambda: comp.set_attachments(chat.pending_images))
        comp.send_requested.connect(self._send)
        comp.stop_requested.connect(chat.stop)
        comp.attach_requested.connect(self.pick_images)
        comp.files_pasted.connect(h.drops.handle)
        comp.remove_attachment.connect(chat.remove_attachment)
        comp.think_toggled.connect(h.settings_ctrl.set_think)
        tr.copy_requested.connect(chat.copy_message)
        tr.regenerate_requested.connect(chat.regenerate)
        tr.edit_submitted.connect(chat.edit_and_resend)
        tr.version_requested.connect(chat.switch_version)
        tr.code_copied.connect(lambda: self.w.notify("info", page.tr("Code copied")))
        page.model_box.activated.connect(lambda _i: chat.set_model(page.model_box.currentText()))
        page.settings_btn.clicked.connect(self.open_chat_settings)

    def _send(self, text: str) -> None:
        if self.h.chat.send(text):
            self.w.chat_page.composer.clear()

    def _on_chat_opened(self, chat_id: int) -> None:
        self.w.sidebar.select_chat(chat_id)
        self._on_chat_meta()
        self.w.show_page(CHAT_PAGE)

    def _on_chat_meta(self) -> None:
        h, page = self.h, self.w.chat_page
        h.history.refresh()
        chat = h.chat.chat
        if chat is None:
            page.title.setText("")
            return
        self.w.sidebar.select_chat(chat.id)
        page.title.setText(chat.title or page.tr("New chat"))
        page.set_model(chat.model)
        page.set_welcome(chat.model)
        info = h.models.info(chat.model)
        page.composer.set_think(bool(info and info.thinking), h.settings.think)
        self.w.setWindowTitle(f"{chat.title} — Hearth" if chat.title else "Hearth")

    def pick_images(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self.w, self.w.tr("Attach images"), str(Path.home()), self.w.tr(_IMAGE_FILTER)
        )
        if paths:
            self.h.drops.open_paths([Path(p) for p in paths])

    def open_chat_settings(self) -> None:
        chat = self.h.chat.chat
        if chat is None:
            return
        info = self.h.models.info(chat.model)
        # What applies when a row is not ticked: the model's defaults, and the app's context.
        defaults = {**(info.parameters if info else {}), "num_ctx": self.h.settings.num_ctx}
        dlg = ChatSettingsDialog(chat.system_prompt, chat.options, defaults, chat.model, self.w)
        dlg.accepted.connect(
            lambda: self.h.chat.update_chat_settings(dlg.system_prompt(), dlg.overrides())
        )
        dlg.open()

    # -- sidebar -------------------------------------------------------------------------------

    def _sidebar(self) -> None:
        h, sb = self.h, self.w.sidebar
        sb.new_chat.connect(lambda: h.chat.new_chat())
        sb.chat_selected.connect(h.chat.open_chat)
        sb.search_changed.connect(h.history.search)
        sb.rename_requested.connect(self.rename_chat)
        sb.delete_requested.connect(self.delete_chat)
        h.history.chat_deleted.connect(self._on_chat_deleted)

    def rename_chat(self, chat_id: int) -> None:
        chat = self.h.store.chat(chat_id)
        if chat is None:
            return
        title, ok = QInputDialog.getText(
            self.w, self.w.tr("Rename chat"), self.w.tr("Title"), text=chat.title
        )
        if ok:
            self.h.history.rename(chat_id, title)
            if self.h.chat.chat and self.h.chat.chat.id == chat_id:
                self.h.chat.open_chat(chat_id)

    def delete_chat(self, chat_id: int) -> None:
        chat = self.h.store.chat(chat_id)
        if chat is None:
            return
        answer = QMessageBox.question(
            self.w,
            self.w.tr("Delete chat"),
            self.w.tr("Delete “%1” and all its messages?").replace("%1", chat.title or "New chat"),
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.h.history.delete(chat_id)

    def _on_chat_deleted(self, chat_id: int) -> None:
        chat = self.h.chat.chat
        if chat is not None and chat.id == chat_id:
            self.h.chat.close_chat()
            rest = self.h.store.chats()
            if rest:
                self.h.chat.open_chat(rest[0].id)
            else:
                self.h.chat.new_chat()

    # -- models --------------------------------------------------------------------------------

    def _models(self) -> None:
        h, mp = self.h, self.w.models_page
        h.models.notice.connect(self.w.notify)
        h.models.models_changed.connect(self._on_chat_meta)
        h.models.model_updated.connect(lambda _n: self._on_chat_meta())
        h.models.import_started.connect(self._on_import_started)
        h.models.import_progress.connect(mp.show_import)
        h.models.import_finished.connect(self._on_imported)
        mp.refresh_requested.connect(h.models.refresh)
        mp.import_requested.connect(self.pick_gguf)
        mp.delete_requested.connect(h.models.delete)
        mp.chat_requested.connect(self._chat_with)

    def _on_import_started(self, name: str) -> None:
        mp = self.w.models_page
        self.w.show_page(MODELS_PAGE)  # where the progress bar is
        mp.show_import(mp.tr("Importing %1…").replace("%1", name), 0, 0)

    def _on_imported(self, name: str, ok: bool, _message: str) -> None:
        mp = self.w.models_page
        mp.hide_import()
        if ok:
            mp.select_name(name)

    def _chat_with(self, name: str) -> None:
        if name:
            self.h.chat.new_chat(name)
            self.w.show_page(CHAT_PAGE)

    def pick_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.w, self.w.tr("Import a model"), str(Path.home()), self.w.tr("GGUF models (*.gguf)")
        )
        if path:
            self.h.models.import_gguf(Path(path))

    # -- settings ------------------------------------------------------------------------------

    def _settings(self) -> None:
        sc, sp = self.h.settings_ctrl, self.w.settings_page
        sc.changed.connect(self.show_settings)
        sc.theme_changed.connect(self._on_theme)
        sp.api_toggled.connect(sc.set_api_enabled)
        sp.port_changed.connect(sc.set_api_port)
        sp.expose_toggled.connect(sc.set_api_expose)
        sp.new_key_requested.connect(sc.regenerate_api_key)
        sp.copy_key_requested.connect(self._copy_key)
        sp.num_ctx_changed.connect(sc.set_num_ctx)
        sp.num_gpu_changed.connect(sc.set_num_gpu)
        sp.num_thread_changed.connect(sc.set_num_thread)
        sp.theme_changed.connect(sc.set_theme)
        sp.models_dir_changed.connect(sc.set_models_dir)
        sp.browse_models_dir.connect(self._browse_models_dir)
        sp.open_logs.connect(
            lambda: QDesktopServices.openUrl(
                QUrl.fromLocalFile(str(self.h.service.log_path.parent))
            )
        )
        sp.show_shortcuts.connect(self.show_shortcuts)

    def _on_theme(self, palette: Palette) -> None:
        self.w.chat_page.transcript.set_palette(palette)

    def _copy_key(self) -> None:
        QGuiApplication.clipboard().setText(self.h.settings.api_key)
        self.w.notify("info", self.w.tr("API key copied"))

    def _browse_models_dir(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self.w, self.w.tr("Models folder"), self.h.settings.models_dir or str(Path.home())
        )
        if folder:
            self.h.settings_ctrl.set_models_dir(folder)

    def api_status_text(self) -> str:
        s, ep = self.h.settings, self.h.service.endpoint
        tr = self.w.tr
        if not s.api_enabled:
            return tr("Off: only Hearth itself can reach its engine (a private port and key).")
        if ep is None:
            return tr("Starting on port %1…").replace("%1", str(s.api_port))
        if s.api_expose:
            return tr(
                "On: listening on every network interface, port %1. Clients send the header "
                "“Authorization: Bearer <key>”."
            ).replace("%1", str(ep.port))
        return (
            tr("On: listening at http://127.0.0.1:%1 (try %2).")
            .replace("%1", str(ep.port))
            .replace("%2", f"curl http://127.0.0.1:{ep.port}/api/tags")
        )

    def show_settings(self) -> None:
        self.w.settings_page.show_settings(self.h.settings, self.api_status_text())

    # -- shortcuts -----------------------------------------------------------------------------

    def _actions(self) -> None:
        h, w = self.h, self.w
        w.act_new_chat.triggered.connect(lambda: h.chat.new_chat())
        w.act_stop.triggered.connect(h.chat.stop)
        w.act_regenerate.triggered.connect(lambda: h.chat.regenerate())
        w.act_edit_last.triggered.connect(self._edit_last)
        w.act_prev_version.triggered.connect(lambda: self._switch_last(-1))
        w.act_next_version.triggered.connect(lambda: self._switch_last(1))
        w.act_copy_last.triggered.connect(self._copy_last)
        w.act_attach.triggered.connect(self.pick_images)
        w.act_chat_settings.triggered.connect(self.open_chat_settings)
        w.act_import.triggered.connect(self.pick_gguf)
        w.act_help.triggered.connect(self.show_shortcuts)

    def _edit_last(self) -> None:
        widget = self.w.chat_page.transcript.widget_for(self.h.chat.last_message_id("user"))
        if widget is not None and not self.h.chat.busy:
            self.w.show_page(CHAT_PAGE)
            widget.start_edit()

    def _switch_last(self, delta: int) -> None:
        mid = self.h.chat.last_message_id("assistant")
        if mid:
            self.h.chat.switch_version(mid, delta)

    def _copy_last(self) -> None:
        mid = self.h.chat.last_message_id("assistant")
        if mid:
            self.h.chat.copy_message(mid)

    def show_shortcuts(self) -> None:
        ShortcutsDialog(self.w).open()
