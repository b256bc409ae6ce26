"""The open chat's state (`ChatState`, the base of `chat.ChatController`): its signals, every
field of the controller, the chats (open, create, close, the one deleted), its model and
settings, and the context the next request would use.

Every field of the controller is set in `ChatState.__init__`, so each layer above reads what it
needs from here: chat_inputs.py (images, documents, tool servers, the request), chat_compare.py
(Compare's side of a question), chat_sending.py (sending, compaction, the streamed reply),
chat.py (versions, regenerate, edit, messages from an MCP prompt). A layer that handles one of
these fields' signals connects it in `_connect`, calling `super()._connect()` first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...app_settings import AppSettings, save_settings
from ...history import Chat, ChatStore, Message
from ..api_client import ApiClient
from ..item_models.conversation import ConversationModel, MessageItem
from .agent_reply import AgentReply
from .clipboard import copy_text
from .compaction import Compactor
from .compare import CompareController
from .documents import DocumentsController
from .models import ModelsController
from .request import context_used, context_window
from .tools import ToolsController

__all__ = ["ChatState"]


class ChatState(QObject):
    """The open chat and the fields of `chat.ChatController` (see the module doc)."""

    chat_opened = Signal(int)  # chat id, 0 when none is open
    chat_meta_changed = Signal()  # title, model or settings changed
    busy_changed = Signal(bool)
    attachments_changed = Signal()
    context_changed = Signal(int, int)  # tokens used, context window
    reply_finished = Signal(int, str)  # message id, final state
    notice = Signal(str, str)  # level, sentence
    approval_needed = Signal(object)  # PendingCall: a tool call waits for the user
    approval_settled = Signal()  # ... and was answered (or the reply ended)

    def __init__(
        self,
        store: ChatStore,
        client: ApiClient,
        models: ModelsController,
        settings: Callable[[], AppSettings],
        tools: ToolsController | None = None,
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
        self._tools = tools
        self._reply: AgentReply | None = None  # the reply being written
        self._preparing = False  # a sent question waits for its vector (documents.on_sent)
        self.documents = DocumentsController(store, client, models, self)
        self.documents.changed.connect(self.attachments_changed)
        self.documents.notice.connect(self.notice)
        self.compare = CompareController(
            store, client, self.conversation, self.documents.extras, self
        )
        self._compare_with = ""  # the second model of the question being prepared (Compare)
        self.conversation.extras = lambda m: self.documents.extras(m) | self.compare.extras(m)
        models.model_updated.connect(self._on_model_info)
        self._compactor = Compactor(client, self)
        self._compacting: Message | None = None  # the question waiting for its summary
        self._compact_covers = 0
        # Checked before a text starting with "/" is sent: one that returns True ran it as a
        # command (McpController.handle_command: an MCP prompt), and it is not sent.
        self.commands: list[Callable[[str], bool]] = []
        self._connect()

    def _connect(self) -> None:
        """Connect the signals of the fields to the handlers of the layers above (each
        calls `super()._connect()` first)."""

    # -- state -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A reply (or a comparison) is being written, or its question prepared (its vector
        fetched)."""
        return self._reply is not None or self._preparing or self.compare.busy

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
        self.context_changed.emit(context_used(path), self._window(path))

    def _window(self, path: list[Any]) -> int:
        """The open chat's context window (`context_window`: asked for, else the service's
        word). Before a chat is open: the app's setting, else 4096."""
        runtime = self._settings().request_options()
        if self.chat is None:
            return int(runtime.get("num_ctx") or 0) or 4096
        info = self._models.info(self.chat.model)
        trained, decided = (info.context_length, info.num_ctx) if info else (0, 0)
        return context_window(self.chat, runtime, path, trained, decided)

    def num_ctx(self) -> int:
        """The open chat's context window, as its requests will have it."""
        return self._window(self._store.path(self.chat.id) if self.chat else [])

    def option_defaults(self) -> dict[str, Any]:
        """What applies to the open chat where it overrides nothing: its model's defaults, and
        its context length (the app's setting, else the service's word)."""
        info = self._models.info(self.model)
        path = self._store.path(self.chat.id) if self.chat else []
        return {**(info.parameters if info else {}), "num_ctx": self._window(path)}

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
        self.documents.pending.clear()
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

    def on_chat_deleted(self, chat_id: int) -> None:
        """A chat was deleted: if it was the open one, open the newest left (or a new one)."""
        if self.chat is None or self.chat.id != chat_id:
            return
        self.close_chat()
        rest = self._store.chats()
        if rest:
            self.open_chat(rest[0].id)
        else:
            self.new_chat()

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

    # -- messages ----------------------------------------------------------------------------

    def copy_message(self, message_id: int) -> str:
        msg = self._store.message(message_id)
        text = msg.content if msg else ""
        copy_text(text)
        self.notice.emit("info", self.tr("Copied"))
        return text

    def _last(self, role: str) -> Message | None:
        if self.chat is None:
            return None
        return next((m for m in reversed(self._store.path(self.chat.id)) if m.role == role), None)

    def last_message_id(self, role: str) -> int:
        msg = self._last(role)
        return msg.id if msg else 0

    def item(self, message_id: int) -> MessageItem | None:
        row = self.conversation.row_of(message_id)
        return self.conversation.item(row) if row >= 0 else None
