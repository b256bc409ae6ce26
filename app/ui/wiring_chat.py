"""Wiring for the chat page: the open chat (ChatController) on screen, and the user's actions
on it (the composer, the transcript's buttons, the header, and the chat shortcuts)."""

from __future__ import annotations

from .controllers.chat import ChatController
from .controllers.drops import DropController
from .controllers.models import ModelsController
from .controllers.settings import SettingsController
from .views.main_window import CHAT_PAGE, MainWindow
from .widgets.message import MessageWidget

__all__ = ["wire_chat_page"]


def wire_chat_page(
    window: MainWindow,
    chat: ChatController,
    models: ModelsController,
    settings: SettingsController,
    drops: DropController,
) -> None:
    page, dialogs = window.chat_page, window.dialogs
    composer, transcript = page.composer, page.transcript

    # -- the open chat on screen ---------------------------------------------------------------

    def show_chat() -> None:
        """The header (title, model, welcome text, think switch) and the window title."""
        open_chat = chat.chat
        if open_chat is None:
            page.title.setText("")
            return
        page.title.setText(open_chat.title or page.tr("New chat"))
        page.set_model(open_chat.model)
        page.set_welcome(open_chat.model)
        info = models.info(open_chat.model)
        page.set_runs_on(info.runs_on if info else "")
        composer.set_think(bool(info and info.thinking), settings.current().think)
        composer.set_vision(chat.images_refused())
        show_images_note()
        window.setWindowTitle(f"{open_chat.title} — Hearth" if open_chat.title else "Hearth")

    def show_images_note() -> None:
        """A warning over the images waiting to go when the chat's model will refuse them."""
        composer.set_images_note(chat.images_refused() if chat.pending_images else "")

    def show_attachments() -> None:
        composer.set_attachments(chat.pending_images)
        composer.documents.set_documents(chat.document_chips(), chat.documents.progress)
        show_images_note()

    def on_opened(_chat_id: int) -> None:
        show_chat()
        window.show_page(CHAT_PAGE)

    chat.notice.connect(window.notify)
    chat.chat_opened.connect(on_opened)
    chat.chat_meta_changed.connect(show_chat)
    models.models_changed.connect(show_chat)  # the model chooser and the think switch
    models.model_updated.connect(lambda _name: show_chat())
    models.running_changed.connect(show_chat)  # where the model runs, once loaded
    chat.reply_finished.connect(lambda *_a: models.refresh_running())  # the reply loaded it
    chat.busy_changed.connect(composer.set_busy)
    chat.busy_changed.connect(transcript.set_busy)
    chat.context_changed.connect(page.meter.set_usage)
    chat.attachments_changed.connect(show_attachments)

    # -- what the user does ----------------------------------------------------------------------

    def send(text: str) -> None:
        if chat.send(text):
            composer.clear()

    def attach() -> None:
        if not chat.check_images_allowed():  # say so before the file dialog, not after
            return
        paths = dialogs.pick_images()
        if paths:
            drops.open_paths(paths)

    def edit_chat_settings() -> None:
        open_chat = chat.chat
        if open_chat is not None:
            dialogs.edit_chat_settings(
                open_chat.system_prompt,
                open_chat.options,
                chat.option_defaults(),
                open_chat.model,
                chat.update_chat_settings,
            )

    def edit_last() -> None:
        widget = transcript.widget_for(chat.last_message_id("user"))
        if isinstance(widget, MessageWidget) and not chat.busy:  # (a summary has no editor)
            window.show_page(CHAT_PAGE)
            widget.start_edit()

    def switch_last(delta: int) -> None:
        mid = chat.last_message_id("assistant")
        if mid:
            chat.switch_version(mid, delta)

    def copy_last() -> None:
        mid = chat.last_message_id("assistant")
        if mid:
            chat.copy_message(mid)

    composer.send_requested.connect(send)
    composer.stop_requested.connect(chat.stop)
    composer.attach_requested.connect(attach)
    composer.attach_document_requested.connect(lambda: drops.open_paths(dialogs.pick_documents()))
    composer.files_pasted.connect(drops.handle)
    composer.remove_attachment.connect(chat.remove_attachment)
    composer.documents.remove_requested.connect(chat.documents.remove)
    composer.think_toggled.connect(settings.set_think)
    transcript.copy_requested.connect(chat.copy_message)
    transcript.regenerate_requested.connect(chat.regenerate)
    transcript.edit_submitted.connect(chat.edit_and_resend)
    transcript.version_requested.connect(chat.switch_version)
    transcript.summary_undo_requested.connect(chat.set_summary_undone)
    transcript.code_copied.connect(lambda: window.notify("info", page.tr("Code copied")))
    page.model_box.activated.connect(lambda _i: chat.set_model(page.model_box.currentText()))
    page.settings_btn.clicked.connect(edit_chat_settings)

    window.act_new_chat.triggered.connect(lambda: chat.new_chat())
    window.act_stop.triggered.connect(chat.stop)
    window.act_regenerate.triggered.connect(lambda: chat.regenerate())
    window.act_edit_last.triggered.connect(edit_last)
    window.act_prev_version.triggered.connect(lambda: switch_last(-1))
    window.act_next_version.triggered.connect(lambda: switch_last(1))
    window.act_copy_last.triggered.connect(copy_last)
    window.act_attach.triggered.connect(attach)
    window.act_chat_settings.triggered.connect(edit_chat_settings)
