"""Sending a question and writing its reply (`ChatSending`, a layer of `chat.ChatController`
over chat_compare.py): the core of the open chat.

`send` stores the question (with the waiting images and documents; a composer command such as
an MCP prompt's `/name` is run instead, by `commands`), and `_prepare_reply` answers a stored
question: its documents go with it (their vector fetched off the GUI thread), the oldest turns
are summarised first when the turn would not fit the context (`_compact`: compaction.py; the
summary is a message under the question, the reply goes under it), then `_start_reply` starts
the reply, or Compare's two (chat_compare.py). The reply is an AgentReply (agent_reply.py)
streaming into the conversation; `stop` stops it, `shutdown` keeps it as it stands at exit.
"""

from __future__ import annotations

from typing import Any

from ...history import Message
from ...history.chat_store import make_title
from ...history.compaction import SUMMARY
from ...history.records import STREAMING
from ..api_client import ApiError
from .agent_reply import AgentReply, no_grants
from .chat_compare import ChatCompare
from .compaction import compaction_plan
from .errors import friendly_error
from .model_turn import ModelTurn

__all__ = ["ChatSending"]


class ChatSending(ChatCompare):
    """Send, compact, reply, stop (see the module doc)."""

    def _connect(self) -> None:
        super()._connect()
        self._compactor.done.connect(self._on_compacted)

    # -- sending -----------------------------------------------------------------------------

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

    # -- the reply ---------------------------------------------------------------------------

    def _start_reply(self, user_id: int) -> None:
        assert self.chat is not None
        self._store.set_leaf(self.chat.id, user_id)
        path = self._store.path(self.chat.id)
        body = self._body(self.chat.model, path)
        if self._start_comparison(user_id, path, body):
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
