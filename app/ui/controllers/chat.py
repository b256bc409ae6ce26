"""The open chat: send, stream, stop, regenerate, edit into a branch, switch versions.

Every streamed piece is committed to the history database before the screen shows it, so a
killed app keeps what was on screen; ChatStore marks such a reply interrupted on next start.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QObject, Signal
from PySide6.QtGui import QGuiApplication, QImage

from ...app_settings import Settings, save_settings
from ...history import Chat, ChatStore
from ...history.chat_store import make_title
from ...history.records import DONE, ERROR, STOPPED, STREAMING
from ..api_client import ApiClient, ApiError, Call
from ..item_models.conversation import ConversationModel, MessageItem
from .errors import friendly_error
from .models import ModelsController
from .reply import chat_body, context_used, context_window, reply_stats

__all__ = ["ChatController"]


class ChatController(QObject):
    chat_opened = Signal(int)  # chat id, 0 when none is open
    chat_meta_changed = Signal()  # title, model or settings changed
    busy_changed = Signal(bool)
    attachments_changed = Signal()
    context_changed = Signal(int, int)  # tokens used, context window
    reply_finished = Signal(int, str)  # message id, final state
    notice = Signal(str, str)  # level, sentence

    def __init__(
        self,
        store: ChatStore,
        client: ApiClient,
        models: ModelsController,
        settings: Callable[[], Settings],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._client = client
        self._models = models
        self._settings = settings
        self.conversation = ConversationModel(self)
        self.chat: Chat | None = None
        self.pending_images: list[bytes] = []
        self._call: Call | None = None
        self._reply_id = 0
        self._reply_chat = 0
        self._content = ""
        self._thinking = ""
        self._t0 = 0.0
        self._ttft: float | None = None
        self._think_start = 0.0
        self._think_s = 0.0
        models.model_updated.connect(self._on_model_info)

    # -- state -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._call is not None

    @property
    def model(self) -> str:
        return self.chat.model if self.chat else self.new_chat_model()

    def new_chat_model(self) -> str:
        """The model a new chat gets: the one last picked while it is installed (or while the
        list of installed models has not arrived yet), else the default model."""
        settings = self._settings()
        last = settings.last_model
        if last and (not self._models.loaded or last in self._models.names()):
            return last
        return settings.default_model

    def _remember(self, name: str) -> None:
        """Keep `name` as the model last picked, for later new chats (and after a restart)."""
        settings = self._settings()
        if name and name != settings.last_model:
            settings.last_model = name
            with contextlib.suppress(OSError):  # unsaved, it still applies until the app quits
                save_settings(settings)

    def _reload(self, full: bool = False) -> None:
        if self.chat is None:
            self.conversation.set_messages([])
            return
        self.chat = self._store.chat(self.chat.id)
        path = self._store.path(self.chat.id) if self.chat else []
        if full:
            self.conversation.set_messages(path)
        else:
            self.conversation.sync(path)
        self._emit_context(path)

    def _emit_context(self, path: list[Any] | None = None) -> None:
        if self.chat is None:
            self.context_changed.emit(0, 0)
            return
        path = self._store.path(self.chat.id) if path is None else path
        info = self._models.info(self.chat.model)
        window = context_window(
            self.chat, self._settings().request_options(), info.context_length if info else 0
        )
        self.context_changed.emit(context_used(path), window)

    def _on_model_info(self, name: str) -> None:
        if self.chat and self.chat.model == name:
            self._emit_context()
            self.chat_meta_changed.emit()

    # -- chats -------------------------------------------------------------------------------

    def open_chat(self, chat_id: int) -> None:
        chat = self._store.chat(chat_id)
        if chat is None:
            return
        self.chat = chat
        self.pending_images.clear()
        self.attachments_changed.emit()
        self._reload(full=True)
        self.chat_opened.emit(chat.id)

    def new_chat(self, model: str | None = None) -> int:
        """Open an empty chat (reusing the open one if it is still empty) on `model`, which
        counts as picked (the models page's "chat with"), else on `new_chat_model()`."""
        if model:
            self._remember(model)
        else:
            model = self.new_chat_model()
        if self.chat is not None and self.chat.current_leaf is None and not self.busy:
            self._switch_model(model)
            self.chat_opened.emit(self.chat.id)
            return self.chat.id
        chat = self._store.create_chat(model)
        self.chat_meta_changed.emit()
        self.open_chat(chat.id)
        return chat.id

    def close_chat(self) -> None:
        self.chat = None
        self.conversation.set_messages([])
        self.chat_opened.emit(0)

    def set_model(self, name: str) -> None:
        """The user picked `name` for the open chat (its model chooser): later new chats use
        it too."""
        if self.chat is None or not name:
            return
        self._remember(name)
        self._switch_model(name)

    def _switch_model(self, name: str) -> None:
        if self.chat is None or not name or name == self.chat.model:
            return
        self._store.update_chat(self.chat.id, model=name)
        self.chat.model = name
        self.chat_meta_changed.emit()
        self._emit_context()

    def update_chat_settings(self, system_prompt: str, options: dict[str, Any]) -> None:
        if self.chat is None:
            return
        clean = {k: v for k, v in options.items() if v is not None}
        self._store.update_chat(self.chat.id, system_prompt=system_prompt, options=clean)
        self.chat.system_prompt, self.chat.options = system_prompt, clean
        self.chat_meta_changed.emit()
        self._emit_context()

    # -- images ------------------------------------------------------------------------------

    def can_see_images(self) -> bool:
        info = self._models.info(self.model)
        return bool(info and info.vision)

    def attach_images(self, images: list[bytes]) -> bool:
        """Queue images for the next message; refused (with a reason) for text-only models."""
        if not images:
            return False
        if not self.can_see_images():
            self.notice.emit(
                "error",
                self.tr(
                    "“%1” cannot see images: it is a text-only model. Pick a model with vision "
                    "to ask about a picture."
                ).replace("%1", self.model),
            )
            return False
        good = [img for img in images if not QImage.fromData(img).isNull()]
        if len(good) < len(images):
            self.notice.emit("error", self.tr("That file is not an image Hearth can read."))
        self.pending_images.extend(good)
        self.attachments_changed.emit()
        return bool(good)

    def attach_qimage(self, image: QImage) -> bool:
        data = QByteArray()
        buf = QBuffer(data)
        buf.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buf, "PNG")
        return self.attach_images([bytes(data.data())])

    def remove_attachment(self, index: int) -> None:
        if 0 <= index < len(self.pending_images):
            del self.pending_images[index]
            self.attachments_changed.emit()

    # -- sending -----------------------------------------------------------------------------

    def send(self, text: str) -> bool:
        text = text.strip()
        if self.busy or (not text and not self.pending_images):
            return False
        if self.chat is None:
            self.new_chat()
        assert self.chat is not None
        user = self._store.add_message(
            self.chat.id, self.chat.current_leaf, "user", text, images=self.pending_images
        )
        self.pending_images = []
        self.attachments_changed.emit()
        self._store.set_auto_title(self.chat.id, make_title(text) or self.tr("Image"))
        self.chat_meta_changed.emit()
        self._start_reply(user.id)
        return True

    def regenerate(self, message_id: int | None = None) -> bool:
        """Answer the same question again; the new reply is a sibling version of the old."""
        if self.busy or self.chat is None:
            return False
        target = self._store.message(message_id) if message_id else self._last("assistant")
        if target is None or target.role != "assistant" or target.parent_id is None:
            return False
        self._start_reply(target.parent_id)
        return True

    def edit_and_resend(self, message_id: int, text: str) -> bool:
        """Ask an edited question as a new branch; the original stays one ◀ away."""
        original = self._store.message(message_id)
        text = text.strip()
        if self.busy or self.chat is None or original is None or original.role != "user":
            return False
        if not text and not original.images:
            return False
        user = self._store.add_message(
            self.chat.id, original.parent_id, "user", text, images=original.images
        )
        self._start_reply(user.id)
        return True

    def switch_version(self, message_id: int, delta: int) -> bool:
        if self.busy or self.chat is None:
            return False
        sibs = self._store.siblings(message_id)
        if message_id not in sibs:
            return False
        i = sibs.index(message_id) + delta
        if not 0 <= i < len(sibs):
            return False
        self._store.select(self.chat.id, sibs[i])
        self._reload()
        return True

    def copy_message(self, message_id: int) -> str:
        msg = self._store.message(message_id)
        text = msg.content if msg else ""
        QGuiApplication.clipboard().setText(text)
        self.notice.emit("info", self.tr("Copied"))
        return text

    def _last(self, role: str) -> Any:
        if self.chat is None:
            return None
        return next((m for m in reversed(self._store.path(self.chat.id)) if m.role == role), None)

    def last_message_id(self, role: str) -> int:
        msg = self._last(role)
        return msg.id if msg else 0

    # -- streaming ---------------------------------------------------------------------------

    def _start_reply(self, user_id: int) -> None:
        assert self.chat is not None
        self._store.set_leaf(self.chat.id, user_id)
        path = self._store.path(self.chat.id)
        info = self._models.info(self.chat.model)
        think = self._settings().think if info and info.thinking else None
        body = chat_body(self.chat, path, self._settings().request_options(), think)
        reply = self._store.add_message(
            self.chat.id, user_id, "assistant", model=self.chat.model, state=STREAMING
        )
        self._reply_id, self._reply_chat = reply.id, self.chat.id
        self._content = self._thinking = ""
        self._t0, self._ttft, self._think_start, self._think_s = time.monotonic(), None, 0.0, 0.0
        self._reload()
        call = self._client.post("/api/chat", body, stream=True)
        call.chunk.connect(self._on_chunk)
        call.done.connect(self._on_done)
        call.failed.connect(self._on_failed)
        self._call = call
        self.busy_changed.emit(True)

    def stop(self) -> None:
        if self._call is not None:
            self._call.cancel()

    def _on_chunk(self, chunk: dict[str, Any]) -> None:
        msg = chunk.get("message") or {}
        piece, thought = str(msg.get("content") or ""), str(msg.get("thinking") or "")
        if not piece and not thought:
            return
        now = time.monotonic()
        if self._ttft is None:
            self._ttft = now - self._t0
        if thought and not self._think_start:
            self._think_start = now
        if piece and self._think_start and not self._think_s:
            self._think_s = now - self._think_start
        self._content += piece
        self._thinking += thought
        # Commit first, then show: the screen never holds text the database lacks.
        self._store.update_message(self._reply_id, content=self._content, thinking=self._thinking)
        if self.chat and self.chat.id == self._reply_chat:
            self.conversation.update(self._reply_id, content=self._content, thinking=self._thinking)

    def _finish(self, state: str, stats: dict[str, Any], error: str = "") -> None:
        rid, chat_id = self._reply_id, self._reply_chat
        self._call = None
        self._store.update_message(rid, state=state, stats=stats, error=error)
        if self.chat and self.chat.id == chat_id:
            self.conversation.update(rid, state=state, stats=stats, error=error)
            self._emit_context()
        self.busy_changed.emit(False)
        self.chat_meta_changed.emit()
        self.reply_finished.emit(rid, state)

    def _on_done(self, final: dict[str, Any]) -> None:
        think_s = self._think_s or (
            time.monotonic() - self._think_start if self._think_start else 0.0
        )
        self._finish(DONE, reply_stats(final, self._ttft, think_s))

    def _on_failed(self, err: ApiError) -> None:
        stats = {"ttft": self._ttft} if self._ttft is not None else {}
        if err.kind == "cancelled":
            self._finish(STOPPED, stats)
            return
        model = self.chat.model if self.chat else ""
        text = friendly_error(err, model)
        self._finish(ERROR, stats, text)
        self.notice.emit("error", text)

    def shutdown(self) -> None:
        """At exit: a reply still streaming is kept as it stands, marked stopped."""
        if self._call is not None:
            call, self._call = self._call, None
            call.failed.disconnect(self._on_failed)
            call.cancel()
            self._store.update_message(self._reply_id, state=STOPPED)

    def item(self, message_id: int) -> MessageItem | None:
        row = self.conversation.row_of(message_id)
        return self.conversation.item(row) if row >= 0 else None
