"""The open chat: open, create, close; send, stop, regenerate, edit into a branch, switch
versions; the images waiting to go with the next message.

Every reply is an AgentReply (agent_reply.py): hearth.agent's loop, with no tools when the
chat has no tool servers on (one model turn, as a plain reply), which commits every streamed
piece to the history database before the screen shows it, so a killed app keeps what was on
screen; ChatStore marks such a reply interrupted on next start. With tools, the same, plus
its tool calls (each asked for through `approval_needed`) and their results.
When the turn would not fit the context, the oldest turns are summarised first (compaction.py);
the summary is a message under the question, and the reply goes under it. With Compare on
(compare.py), the question is answered by two models side by side instead.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ...agent.loop import no_tools_sentence
from ...app_settings import AppSettings, save_settings
from ...history import Chat, ChatStore, Message
from ...history.chat_store import make_title
from ...history.compaction import SUMMARY
from ...history.records import DONE, STREAMING, UNDONE
from ..api_client import ApiClient, ApiError
from ..item_models.conversation import ConversationModel, MessageItem
from ..widgets.documents import ChipInfo
from .agent_reply import AgentReply, PendingCall, no_grants
from .clipboard import copy_text
from .compaction import Compactor, compaction_plan
from .compare import CompareController
from .documents import DocumentsController
from .errors import friendly_error
from .images import attachable_images
from .model_turn import ModelTurn
from .models import ModelsController
from .request import chat_body, context_used, context_window
from .tools import ToolsController

__all__ = ["ChatController"]


class ChatController(QObject):
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
        self.compare.finished.connect(self._on_compared)
        self._compare_with = ""  # the second model of the question being prepared (Compare)
        self.conversation.extras = lambda m: self.documents.extras(m) | self.compare.extras(m)
        models.model_updated.connect(self._on_model_info)
        self._compactor = Compactor(client, self)
        self._compactor.done.connect(self._on_compacted)
        self._compacting: Message | None = None  # the question waiting for its summary
        self._compact_covers = 0
        # Checked before a text starting with "/" is sent: one that returns True ran it as a
        # command (McpController.handle_command: an MCP prompt), and it is not sent.
        self.commands: list[Callable[[str], bool]] = []

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

    # -- images ------------------------------------------------------------------------------

    def can_see_images(self) -> bool:
        """False only when the open chat's model is known to be text-only; while its details
        have not arrived (or it is not installed) the service has the last word."""
        info = self._models.info(self.model)
        return info is None or not info.details_loaded or info.vision

    def images_refused(self) -> str:
        """Why the open chat's model will refuse pictures ('' when it may take them)."""
        if self.can_see_images():
            return ""
        return self.tr(
            "“%1” cannot see images: it is a text-only model. Pick a model with vision "
            "to ask about a picture."
        ).replace("%1", self.model)

    def check_images_allowed(self) -> bool:
        """True when the open chat's model may take pictures; else say why (a notice)."""
        reason = self.images_refused()
        if reason:
            self.notice.emit("error", reason)
        return not reason

    def attach_images(self, images: list[bytes]) -> bool:
        """Queue images for the next message; refused (with a reason) for text-only models."""
        if not images or not self.check_images_allowed():
            return False
        good = attachable_images(images)
        if len(good) < len(images):
            self.notice.emit("error", self.tr("That file is not an image Hearth can read."))
        self.pending_images.extend(good)
        self.attachments_changed.emit()
        return bool(good)

    def remove_attachment(self, index: int) -> None:
        if 0 <= index < len(self.pending_images):
            del self.pending_images[index]
            self.attachments_changed.emit()

    # -- tools -------------------------------------------------------------------------------

    def tool_servers(self) -> list[tuple[str, bool]]:
        """Each enabled tool server, and whether the open chat uses it."""
        used = set(self.chat.tools) if self.chat else set()
        names = self._tools.enabled_servers() if self._tools else []
        return [(n, n in used) for n in names]

    def set_chat_tool(self, server: str, on: bool) -> None:
        """Turn one tool server on or off for the open chat (kept with the chat)."""
        if self.chat is None:
            return
        tools = [n for n in self.chat.tools if n != server] + ([server] if on else [])
        self._store.set_chat_tools(self.chat.id, tools)
        self.chat.tools = tools
        self.chat_meta_changed.emit()

    def model_can_use_tools(self) -> bool | None:
        """Whether the open chat's model offers tools: None while its details are unknown."""
        info = self._models.info(self.model)
        if info is None or not info.details_loaded:
            return None
        return "tools" in info.capabilities

    def tools_refused(self) -> str:
        """Why the open chat's tool servers will not be used ('' when they will, or none
        is on)."""
        if not any(on for _n, on in self.tool_servers()):
            return ""
        if self.model_can_use_tools() is False:
            return no_tools_sentence(self.model)  # the CLI's words too
        return ""

    def _active_tool_servers(self) -> list[str]:
        if self.chat is None or self._tools is None or not self.model_can_use_tools():
            return []
        return [n for n, on in self.tool_servers() if on]

    def answer_approval(self, choice: str) -> None:
        """The user's answer on the approval card: ONCE, ALWAYS (this tool), SERVER (every
        tool of its server; both remembered by `ToolsController.policy`) or DENY."""
        reply = self._reply
        if not isinstance(reply, AgentReply) or reply.pending is None:
            return
        reply.answer(choice)

    def pending_approval(self) -> PendingCall | None:
        """The call of the open chat's reply that waits for the user, if any."""
        reply = self._reply
        if isinstance(reply, AgentReply) and self.chat and reply.chat_id == self.chat.id:
            return reply.pending
        return None

    # -- sending -----------------------------------------------------------------------------

    def num_ctx(self) -> int:
        """The open chat's context window, as its requests will have it."""
        return self._window(self._store.path(self.chat.id) if self.chat else [])

    def attach_documents(self, paths: list[Path]) -> bool:
        """Read documents (off the GUI thread) to go with the next message; a PDF's scanned
        pages are read by the chat's model when it can see, else by an installed vision model."""
        if not paths:
            return False
        self.documents.attach(paths, self.model)
        return True

    def document_chips(self) -> list[ChipInfo]:
        """The waiting documents, each with how it would be sent now (whole or searched)."""
        chat = self.chat
        path = self._store.path(chat.id) if chat else []
        return self.documents.pending_chips(
            chat.system_prompt if chat else "", path, self.num_ctx()
        )

    def send(self, text: str) -> bool:
        text = text.strip()
        # A command the composer offers (an MCP prompt's `/name`) is run, not sent.
        if text.startswith("/") and any(command(text) for command in self.commands):
            return True
        docs = self.documents
        if self.busy or (not text and not self.pending_images and not docs.pending):
            return False
        if docs.reading:
            self.notice.emit("info", self.tr("Still reading the document: send when it is ready."))
            return False
        if self.chat is None:
            self.new_chat()
        assert self.chat is not None
        earlier = self._store.path(self.chat.id)
        user = self._store.add_message(
            self.chat.id, self.chat.current_leaf, "user", text, images=self.pending_images
        )
        title = make_title(text) or (docs.pending[0].name if docs.pending else self.tr("Image"))
        self.pending_images = []
        # The first question names the chat; later ones leave the name the user knows it by.
        self._store.set_auto_title(self.chat.id, title)
        self._prepare_reply(user, earlier)
        self.attachments_changed.emit()
        self.chat_meta_changed.emit()
        return True

    def send_messages(self, messages: list[dict[str, Any]]) -> bool:
        """Messages from elsewhere (an MCP prompt: /api/chat's shape, images in base64) added
        to the chat in order; when the last is the user's, the model answers it as if typed."""
        if self.busy or not messages or self.documents.reading:
            return False
        if self.chat is None:
            self.new_chat()
        assert self.chat is not None
        earlier = self._store.path(self.chat.id)
        parent, last = self.chat.current_leaf, None
        for m in messages:
            images = [base64.b64decode(i) for i in m.get("images") or ()]
            role = "assistant" if m.get("role") == "assistant" else "user"
            last = self._store.add_message(
                self.chat.id, parent, role, str(m.get("content") or ""), images=images
            )
            parent = last.id
        assert last is not None
        self._store.set_auto_title(self.chat.id, make_title(last.content) or self.tr("Prompt"))
        if last.role == "user":
            self._prepare_reply(last, earlier)
        else:
            self._reload()
        self.chat_meta_changed.emit()
        return True

    def _prepare_reply(self, user: Message, earlier: list[Message]) -> None:
        """Its documents go with the stored question `user` (its vector fetched off the GUI
        thread when an embedding model is installed), then the reply starts. Busy meanwhile;
        if another chat was opened in between, the question waits there, unanswered, for
        Regenerate (its documents are stored)."""
        assert self.chat is not None
        self._preparing = True
        self._compare_with = self.compare.take_other(self.chat.model)
        self.busy_changed.emit(True)

        def start() -> None:
            if self.chat is not None and self.chat.id == user.chat_id:
                if not self._compact(user):
                    self._preparing = False
                    self._start_reply(user.id)
            else:
                self._preparing = False
                self.busy_changed.emit(False)

        self.documents.on_sent(user, self.chat.system_prompt, earlier, self.num_ctx(), start)

    # -- compaction --------------------------------------------------------------------------

    def _pinned(self, message: Message) -> bool:
        """A question whose documents' chips it carries is never summarised away."""
        return bool(self.documents.chat_documents.attached(message.id))

    def _compact(self, user: Message) -> bool:
        """Summarise the oldest turns (off the GUI thread) if answering `user` would not fit
        the context; True while that runs (the reply starts when it ends)."""
        assert self.chat is not None
        options = {**self._settings().request_options(), **self.chat.options}
        p = compaction_plan(
            self._store.path(self.chat.id),
            self.chat.system_prompt,
            self.num_ctx(),
            int(options.get("num_predict") or 0),
            self.documents.message_text,
            self._pinned,
        )
        if p is None:
            return False
        self._compacting = user
        # as the chat's requests carry them (no num_ctx unless asked for: the service's own)
        options = {k: v for k, v in options.items() if v is not None}
        self._compactor.start(p, self.chat.model, self.num_ctx(), options)
        self._compact_covers = p.covers
        return True

    def _on_compacted(self, text: str, error: str) -> None:
        user, self._compacting = self._compacting, None
        self._preparing = False
        if user is None:  # stopped (the question waits, unanswered, for Regenerate)
            self.busy_changed.emit(False)
            return
        parent = user.id
        if text:
            summary = self._store.add_message(
                user.chat_id, user.id, SUMMARY, text, model=self.chat.model if self.chat else "",
                covers=self._compact_covers,
            )  # fmt: skip
            parent = summary.id
        else:
            self.notice.emit(
                "error",
                self.tr("Hearth could not summarise the earlier messages (%1); they are sent as"
                        " they are.").replace("%1", error),
            )  # fmt: skip
        if self.chat is not None and self.chat.id == user.chat_id:
            self._start_reply(parent)
        else:
            self.busy_changed.emit(False)

    def set_summary_undone(self, message_id: int, undone: bool) -> bool:
        """Undo a summary (its original messages go to the model again) or use it again."""
        msg = self._store.message(message_id)
        if self.busy or msg is None or msg.role != SUMMARY:
            return False
        self._store.update_message(message_id, state=UNDONE if undone else DONE)
        self._reload()
        return True

    def regenerate(self, message_id: int | None = None) -> bool:
        """Answer the same question again; the new reply is a sibling version of the old."""
        if self.busy or self.chat is None:
            return False
        self._compare_with = ""  # (a question prepared for Compare in another chat never ran)
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
        self.documents.copy(original, user)
        self._prepare_reply(user, self._store.path(self.chat.id)[:-1])
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

    def continue_with(self, message_id: int) -> bool:
        """Go on with reply `message_id` of a comparison (Compare): its branch goes on screen
        and its model becomes the chat's."""
        msg = self._store.message(message_id)
        if self.busy or self.chat is None or msg is None or msg.chat_id != self.chat.id:
            return False
        self._store.select(self.chat.id, message_id)
        self._switch_model(msg.model)
        self._reload()
        return True

    def _on_compared(self, chat_id: int, _states: dict[int, str]) -> None:
        if self.chat is not None and self.chat.id == chat_id:
            self._reload()
        self.busy_changed.emit(False)
        self.chat_meta_changed.emit()

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

    # -- the reply ---------------------------------------------------------------------------

    def _body(self, model: str, path: list[Message]) -> dict[str, Any]:
        """The /api/chat request answering `path` on `model` (the chat's, or Compare's other)."""
        assert self.chat is not None
        info = self._models.info(model)
        think = self._settings().think if info and info.thinking else None
        runtime = self._settings().request_options()
        chat = replace(self.chat, model=model)
        return chat_body(chat, path, runtime, think, self.documents.message_text, self._pinned)

    def _start_reply(self, user_id: int) -> None:
        assert self.chat is not None
        self._store.set_leaf(self.chat.id, user_id)
        path = self._store.path(self.chat.id)
        body = self._body(self.chat.model, path)
        other, self._compare_with = self._compare_with, ""
        if other:  # Compare: two replies side by side (no tools), the chat's model on the left
            if self._active_tool_servers():
                self.notice.emit("info", self.tr("Compared replies do not use tools."))
            self.compare.start(self.chat.id, user_id, [body, self._body(other, path)])
            self._reload()
            self.busy_changed.emit(True)
            return
        message = self._store.add_message(
            self.chat.id, user_id, "assistant", model=self.chat.model, state=STREAMING
        )
        servers = self._active_tool_servers()
        servers = servers if self._tools is not None else []
        reply = AgentReply(
            self._store,
            self.chat.id,
            message.id,
            body,
            ModelTurn(self._client.client()),
            self._tools.hub() if self._tools is not None and servers else None,
            servers,
            self._tools.policy if self._tools is not None else no_grants,
            self._settings().tool_max_steps,
            self.can_see_images(),
            self,
        )
        reply.changed.connect(self._on_reply_changed)
        reply.approval_needed.connect(self.approval_needed)
        reply.approval_settled.connect(self.approval_settled)
        reply.server_failed.connect(lambda text: self.notice.emit("error", text))
        reply.grew.connect(self._on_reply_grew)
        reply.ended.connect(self._on_reply_ended)
        self._reload()
        reply.start()
        self._reply = reply
        self.busy_changed.emit(True)

    def stop(self) -> None:
        self.compare.stop()
        if self._compacting is not None:
            self._compacting = None
            self._compactor.abort()
        if self._reply is not None:
            self._reply.cancel()

    def _on_reply_grew(self) -> None:
        reply = self._reply
        if reply is not None and self.chat and self.chat.id == reply.chat_id:
            self.conversation.update(
                reply.message_id, content=reply.content, thinking=reply.thinking
            )

    def _on_reply_changed(self) -> None:
        """A tool-using reply added a message (a turn, a result): show the branch as stored."""
        reply = self._reply
        if reply is not None and self.chat and self.chat.id == reply.chat_id:
            self._reload()

    def _on_reply_ended(self, state: str, stats: dict[str, Any], err: ApiError | None) -> None:
        reply, self._reply = self._reply, None
        assert reply is not None
        rid, chat_id = reply.message_id, reply.chat_id
        reply.deleteLater()
        error = friendly_error(err, self.chat.model if self.chat else "") if err is not None else ""
        self._store.update_message(rid, state=state, stats=stats, error=error)
        if self.chat and self.chat.id == chat_id:
            self.conversation.update(rid, state=state, stats=stats, error=error)
            self._reload()
        if stats.get("max_steps"):
            self.notice.emit(
                "info",
                self.tr(
                    "Stopped after %1 model turns, the step limit (Settings → Tools): the last "
                    "tool results were not sent back to the model."
                ).replace("%1", str(self._settings().tool_max_steps)),
            )
        if stats.get("repeated"):
            self.notice.emit(
                "info",
                self.tr(
                    "Stopped: the model called %1 again with the same arguments after it "
                    "already had that call's result."
                ).replace("%1", str(stats["repeated"])),
            )
        self.busy_changed.emit(False)
        self.chat_meta_changed.emit()
        self.reply_finished.emit(rid, state)
        if err is not None:
            self.notice.emit("error", error)

    def shutdown(self) -> None:
        """At exit: a reply still streaming is kept as it stands, marked stopped."""
        self.compare.abandon()
        self._compacting = None
        self._compactor.abort()
        if self._reply is not None:
            reply, self._reply = self._reply, None
            reply.abandon()
            reply.wait(5.0)  # its model turn or running call is being stopped

    def item(self, message_id: int) -> MessageItem | None:
        row = self.conversation.row_of(message_id)
        return self.conversation.item(row) if row >= 0 else None
